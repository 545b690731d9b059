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

from tree_check import report, tree_files, tree_top


def makefiles_text(top):
    text = []
    for root, f in tree_files(top):
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
    top = tree_top()
    files = tracked(top)
    if files is None:
        print("skip: not a git checkout (an unpacked tarball has only the files it names)")
        return 77
    mk = makefiles_text(top)
    missing = [p for p in files if p.endswith((".c", ".h")) and "/" in p
               and os.path.exists(os.path.join(top, p.split("/")[0], "Makefile.inc"))
               and p not in mk]
    return report([f"{p}: named in no Makefile.am or Makefile.inc: `make dist` leaves it out"
                   for p in missing], "source file(s) missing from the Makefiles",
                  "every source file of the daemon's folders is in a Makefile")


if __name__ == "__main__":
    sys.exit(main())
