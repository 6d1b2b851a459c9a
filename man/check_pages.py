#!/usr/bin/env python3
"""Every public function has a manual page that renders without warnings.

For every sluice_* function declared in the given headers (names followed
by '(' outside comments; names ending in '_' are private helpers), man/NAME.3 must exist and be listed for
installation in man/meson.build, either a page or a
".so man3/OTHER.3" link to one in the same directory.  Every page in the
directory must render without warnings under `groff -man -ww -z` and
`man --warnings -E UTF-8 -l`, each when installed.  Exits 77 (skip) when
neither is.

Usage: check_pages.py MAN_DIR HEADER...
"""
import glob
import os
import re
import shutil
import subprocess
import sys


def declared(header):
    with open(header, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^\s*#[^\n]*(\\\n[^\n]*)*", " ", text, flags=re.M)  # macros
    # names ending in '_' are private helpers of header-only glue
    return {n for n in re.findall(r"\b(sluice_[A-Za-z0-9_]+)\s*\(", text)
            if not n.endswith("_")}


def so_target(path):
    """The page a ".so" page points to (its path in the man dir), or None."""
    with open(path, encoding="utf-8") as f:
        lines = [l for l in f.read().split("\n") if l.strip() and not l.startswith('.\\"')]
    if len(lines) == 1 and lines[0].startswith(".so "):
        return lines[0][4:].strip()
    return None


def render(page, mandir):
    """Exit status and warnings of every renderer installed (groff, man)."""
    cmds = []
    if shutil.which("groff"):
        cmds.append(["groff", "-man", "-ww", "-z", page])
    if shutil.which("man"):
        cmds.append(["man", "--warnings", "-E", "UTF-8", "-l", page])
    rc, err = 0, []
    for cmd in cmds:
        r = subprocess.run(cmd, cwd=mandir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, env=dict(os.environ, MANWIDTH="80"))
        rc = rc or r.returncode
        if r.stderr.strip():
            err.append(f"{cmd[0]}: {r.stderr.strip()}")
    return rc, "\n".join(err)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    mandir, headers = sys.argv[1], sys.argv[2:]
    if not shutil.which("groff") and not shutil.which("man"):
        print("neither groff nor man is installed: skipped")
        return 77
    failed = 0

    names = set()
    for h in headers:
        found = declared(h)
        if not found:
            print(f"FAIL {h}: no sluice_* function found")
            failed += 1
        names |= found
    for name in sorted(names):
        page = os.path.join(mandir, name + ".3")
        if not os.path.isfile(page):
            print(f"FAIL {name}: no page {name}.3")
            failed += 1
            continue
        target = so_target(page)
        if target is not None:
            real = os.path.join(mandir, os.path.basename(target))
            if not re.fullmatch(r"man[1-8]/[A-Za-z0-9_.-]+\.[1-8]", target) \
                    or target.split("/")[0][3:] != target[-1] or not os.path.isfile(real) \
                    or so_target(real) is not None:
                print(f"FAIL {name}.3: .so {target} does not name a page of {mandir}")
                failed += 1
                continue
            page = real
        with open(page, encoding="utf-8") as f:
            text = f.read()
        if not re.search(r"^\.SH NAME\n(.*\n)*?.*\b" + re.escape(name) + r"\b",
                         text, flags=re.M):
            print(f"FAIL {name}: {os.path.basename(page)} does not name it under NAME")
            failed += 1
        print(f"ok   {name}: {os.path.relpath(page, mandir)}")

    pages = sorted(glob.glob(os.path.join(mandir, "*.[1-8]")))
    build = os.path.join(mandir, "meson.build")
    if os.path.isfile(build):
        with open(build, encoding="utf-8") as f:
            listed = set(re.findall(r"'([^']+\.[1-8])'", f.read()))
        for page in pages:
            if os.path.basename(page) not in listed:
                print(f"FAIL {os.path.basename(page)}: not installed (add it to man/meson.build)")
                failed += 1
        for name in sorted(listed - {os.path.basename(p) for p in pages}):
            print(f"FAIL {name}: listed in man/meson.build, no such page")
            failed += 1
    for page in pages:
        base = os.path.basename(page)
        if so_target(page) is not None:
            continue
        with open(page, encoding="utf-8") as f:
            text = f.read()
        for section in ("NAME", "SYNOPSIS", "DESCRIPTION"):
            if not re.search(r"^\.SH " + section + r"\b", text, flags=re.M):
                print(f"FAIL {base}: no {section} section")
                failed += 1
        if base.endswith(".3") and not re.search(r"^\.SH RETURN VALUE", text, flags=re.M):
            print(f"FAIL {base}: no RETURN VALUE section")
            failed += 1
        rc, err = render(base, mandir)
        if rc != 0 or err:
            print(f"FAIL {base}: renders with warnings (exit {rc}):\n{err}")
            failed += 1
    print(f"{len(names)} functions, {len(pages)} pages, {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
