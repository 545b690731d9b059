#!/usr/bin/python3
"""Formats C files with clang-format (.clang-format at the top of the tree) and keeps the
tree's tab-aligned trailing comments: clang-format 14 aligns trailing comments with spaces
only, so where a formatted line differs from the original only in the white space before
its trailing comment, the original line stays.

    scripts/format.py FILE...          # rewrite in place
    scripts/format.py --check FILE...  # exit 1 and name the files that would change
"""
import difflib
import re
import subprocess
import sys

COMMENT = re.compile(r"^(.*?\S)?(\s+)(/\*.*|//.*)$")


def split_comment(line):
    """(code, comment) of a line with a trailing comment, else None."""
    m = COMMENT.match(line)
    if not m or m.group(1) is None or '"' in (m.group(1) or ""):
        return None
    return m.group(1).rstrip(), m.group(3)


def same_but_comment_space(orig, new):
    a, b = split_comment(orig), split_comment(new)
    return a is not None and a == b


def merge(orig_lines, new_lines):
    out = []
    sm = difflib.SequenceMatcher(a=orig_lines, b=new_lines, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "replace" and i2 - i1 == j2 - j1:
            for o, n in zip(orig_lines[i1:i2], new_lines[j1:j2]):
                out.append(o if same_but_comment_space(o, n) else n)
        else:
            out.extend(new_lines[j1:j2])
    return out


def formatted(path):
    with open(path) as f:
        orig = f.read()
    new = subprocess.run(["clang-format", "--style=file", path], check=True,
                         capture_output=True, text=True).stdout
    return orig, "".join(merge(orig.splitlines(True), new.splitlines(True)))


def main(argv):
    check = argv[:1] == ["--check"]
    files = argv[1:] if check else argv
    changed = []
    for path in files:
        orig, out = formatted(path)
        if out != orig:
            changed.append(path)
            if not check:
                with open(path, "w") as f:
                    f.write(out)
    for path in changed:
        print(("would change: " if check else "formatted: ") + path)
    return 1 if check and changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
