/* version: which switchboard this is. The release (the repository's VERSION file) and the
 * commit it was built from (`git rev-parse --short HEAD` at build time, "unknown" when built
 * outside a git checkout), generated into build/gen/sb_build_version.h by the Makefile; only
 * base/version.c sees that header, so a new commit rebuilds one object, not the tree.
 * Both strings are label-safe (letters, digits, . _ + -). */
#ifndef SB_BASE_VERSION_H
#define SB_BASE_VERSION_H

extern const char sb_version[]; /* "0.9.0" */
extern const char sb_commit[];  /* "1a2b3c4" or "unknown" */

#endif
