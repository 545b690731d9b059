#!/usr/bin/env python3
"""Every C source and header of the daemon's folders is named in a Makefile.

A file that automake does not know is left out of `make dist`, so the tarball, the Debian
package and the container image that are built from it fail to compile while the build
tree, which has every file, passes. The Debian package's boot test found one so
(worker/stream.h) long after the commit that added it; this finds it at once: each tracked
*.c and *.h in a folder with its own Makefile.inc must appear, by its path from the top,
in some Makefile.am or Makefile.inc.
"""
import os
import subprocess
import sys


def makefiles_text(top):
    text = []
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in {".git", "_build", "autom4te.cache"}]
        for f in files:
            if f == "Makefile.am" or f.endswith("Makefile.inc"):
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    text.append(fh.read())
    return "\n".join(text)


def tracked(top):
    try:
        out = subprocess.run(["git", "-C", top, "ls-files"], check=True,
                             capture_output=True, text=True).stdout
        return out.split()
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "top_srcdir", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    files = tracked(top)
    if files is None:
        print("skip: not a git checkout (an unpacked tarball has only the files it names)")
        return 77
    mk = makefiles_text(top)
    missing = [p for p in files if p.endswith((".c", ".h")) and "/" in p
               and os.path.exists(os.path.join(top, p.split("/")[0], "Makefile.inc"))
               and p not in mk]
    for p in missing:
        print(f"{p}: named in no Makefile.am or Makefile.inc: `make dist` leaves it out")
    if missing:
        print(f"FAIL: {len(missing)} source file(s) missing from the Makefiles")
        return 1
    print("ok: every source file of the daemon's folders is in a Makefile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
