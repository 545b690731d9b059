/* The growth rule of every growable array (common/grow.h). */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

/* The capacity that holds want elements by the doubling rule, or 0 when it or its size in
 * bytes would overflow. */
static size_t grow_cap(size_t cap, size_t want, size_t size, size_t first)
{
	size_t n = cap ? cap : first;

	while (n < want) {
		if (n > SIZE_MAX / 2)
			return 0;
		n *= 2;
	}
	return n > SIZE_MAX / size ? 0 : n;
}

/* Both rules: wipe says how the old block goes (copied and wiped, or realloc). */
static int grow(void *arrp, size_t *cap, size_t want, size_t size, size_t first, bool wipe)
{
	size_t n;
	void *old, *grown;

	assert(size > 0 && first > 0);
	if (want <= *cap)
		return 0;
	n = grow_cap(*cap, want, size, first);
	if (n == 0)
		return -EOVERFLOW;
	/* arrp points at a T *, any object pointer type: copy it as bytes rather than read it
	 * through a void ** (same representation, no aliasing question). */
	memcpy(&old, arrp, sizeof(old));
	grown = wipe ? malloc(n * size) : realloc(old, n * size);
	if (grown == NULL)
		return -ENOMEM;
	if (wipe && old != NULL) {
		memcpy(grown, old, *cap * size);
		explicit_bzero(old, *cap * size);
		free(old);
	}
	memcpy(arrp, &grown, sizeof(grown));
	*cap = n;
	return 0;
}

int grow_array(void *arrp, size_t *cap, size_t want, size_t size, size_t first)
{
	return grow(arrp, cap, want, size, first, false);
}

int grow_array_wipe(void *arrp, size_t *cap, size_t want, size_t size, size_t first)
{
	return grow(arrp, cap, want, size, first, true);
}
