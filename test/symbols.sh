#!/bin/sh
# Only sluice_* is exported from the shared library (-fvisibility=hidden
# plus SLUICE_API), and the soname is versioned.
# Usage: symbols.sh path/to/libsluice.so path/to/sluice.h
lib="$1"; header="$2"
command -v nm >/dev/null 2>&1 || { echo "nm not found: skipped"; exit 77; }
bad=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^sluice_' | grep -v '^_' || true)
if [ -n "$bad" ]; then
    echo "exported symbols outside the sluice_ prefix:"; echo "$bad"; exit 1
fi
count=0
for name in $(grep -o '\bsluice_[a-z_]*(' "$header" | tr -d '(' | sort -u); do
    nm -D --defined-only "$lib" | awk '{print $3}' | grep -qx "$name" || { echo "$name is not exported"; exit 1; }
    count=$((count + 1))
done
if command -v objdump >/dev/null 2>&1; then
    objdump -p "$lib" | grep -q 'SONAME *libsluice\.so\.2$' || { echo "soname is not libsluice.so.2"; exit 1; }
fi
echo "symbols: $count sluice_ symbols, nothing else exported"
