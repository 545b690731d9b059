#!/bin/sh
# Checks that every docs/*.md is listed for the distribution in some Makefile.inc or the
# top Makefile.am (else `make dist` silently drops it and distcheck cannot notice).
srcdir=${top_srcdir:-.}
missing=0
for f in "$srcdir"/docs/*.md; do
	name=docs/$(basename "$f")
	if ! cat "$srcdir"/Makefile.am "$srcdir"/*/Makefile.inc "$srcdir"/tests/*/Makefile.inc \
		2>/dev/null | grep -q "$name"; then
		echo "dist_docs: $name is not in EXTRA_DIST or dist_doc_DATA of any Makefile.inc"
		missing=1
	fi
done
exit $missing
