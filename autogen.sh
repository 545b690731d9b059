#!/bin/sh
# Regenerates the build system (configure, Makefile.in) from configure.ac and Makefile.am.
exec autoreconf --force --install --verbose "$(dirname "$0")"
