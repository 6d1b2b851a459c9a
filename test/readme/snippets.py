#!/usr/bin/env python3
"""Compile, and where possible run, every ```c block of README.md.

Every C block of the README must be a complete program: it is written to a
file as is, compiled with `cc -std=c11 -Wall -Wextra -Werror` against the
build tree's header directory and static libraries (with the flags the
README tells readers to use: -lck -pthread), and run; it must exit 0.
Blocks that include <sluice_redis.h> also link libsluice-redis and hiredis
and are compiled only (they need a Redis server to run); without hiredis
they are skipped with a message.

The EXAMPLE sections of the manual pages that are complete programs (those
defining main) are checked the same way when --man DIR is given.

Usage: snippets.py [--man DIR] README INCLUDE_DIR LIBSLUICE_A [LIBSLUICE_REDIS_A]
Environment: CC (default cc), SNIPPET_CFLAGS (added to the compiler flags,
e.g. -fsanitize=... in sanitizer builds).
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile


def blocks(text):
    """(line number, language, body) of every fenced block."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```\s*([A-Za-z0-9_+-]*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang, body = i + 1, m.group(2), []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        out.append((start, lang, "\n".join(body) + "\n"))
        i += 1
    return out


def man_examples(mandir):
    """(page:line, "c", body) of every .EX/.EE block defining main()."""
    out = []
    for page in sorted(os.listdir(mandir)):
        if not re.search(r"\.[1-8]$", page):
            continue
        with open(os.path.join(mandir, page), encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            if lines[i].strip() != ".EX":
                i += 1
                continue
            start, body = i + 2, []
            i += 1
            while i < len(lines) and lines[i].strip() != ".EE":
                body.append(lines[i])
                i += 1
            text = "\n".join(body) + "\n"
            # the roff escapes used in code: \e (backslash), \- (minus)
            text = text.replace("\\e", "\\").replace("\\-", "-")
            if re.search(r"^int main\(", text, flags=re.M):
                out.append((f"{page}:{start}", "c", text))
    return out


def main():
    args = sys.argv[1:]
    mandir = None
    if len(args) >= 2 and args[0] == "--man":
        mandir, args = args[1], args[2:]
    if len(args) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    readme, incdir, libsluice = args[:3]
    libredis = args[3] if len(args) == 4 else None
    cc = shlex.split(os.environ.get("CC", "cc"))
    cflags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-I", incdir]
    cflags += shlex.split(os.environ.get("SNIPPET_CFLAGS", ""))
    libs = [libsluice, "-lck", "-pthread"]

    with open(readme, encoding="utf-8") as f:
        cblocks = [(f"{os.path.basename(readme)}:{b[0]}",) + b[1:]
                   for b in blocks(f.read()) if b[1] == "c"]
    if not cblocks:
        print("FAIL: no ```c block in", readme)
        return 1
    if mandir is not None:
        examples = man_examples(mandir)
        if not examples:
            print("FAIL: no complete program in the EXAMPLE sections of", mandir)
            return 1
        cblocks += examples

    failed = compiled = ran = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, (where, _, body) in enumerate(cblocks):
            src = os.path.join(tmp, f"block{n}.c")
            exe = os.path.join(tmp, f"block{n}")
            with open(src, "w", encoding="utf-8") as f:
                f.write(body)
            redis = re.search(r"#\s*include\s*<sluice_redis\.h>", body) is not None
            extra = []
            if redis:
                if libredis is None:
                    print(f"SKIP {where}: needs libsluice-redis (hiredis not found)")
                    skipped += 1
                    continue
                extra = [libredis, "-lhiredis"]
            cmd = cc + cflags + [src, "-o", exe] + extra + libs
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True)
            if r.returncode != 0:
                print(f"FAIL {where}: does not compile:\n  {' '.join(cmd)}\n{r.stdout}")
                failed += 1
                continue
            compiled += 1
            if redis:
                print(f"ok   {where}: compiles (needs a Redis server: not run)")
                continue
            try:
                r = subprocess.run([exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   universal_newlines=True, timeout=60)
            except subprocess.TimeoutExpired:
                print(f"FAIL {where}: still running after 60 s")
                failed += 1
                continue
            if r.returncode != 0:
                print(f"FAIL {where}: exits {r.returncode}:\n{r.stdout}")
                failed += 1
                continue
            ran += 1
            print(f"ok   {where}: compiles and exits 0")
    print(f"{len(cblocks)} C programs: {compiled} compiled, {ran} ran, "
          f"{skipped} skipped, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
