/* The growth rule of every growable array (common/grow.h). */
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

int grow_array(void *arrp, size_t *cap, size_t want, size_t size, size_t first)
{
	size_t n = *cap ? *cap : first;
	void *old, *grown;

	assert(size > 0 && first > 0);
	if (want <= *cap)
		return 0;
	while (n < want) {
		if (n > SIZE_MAX / 2)
			return -EOVERFLOW;
		n *= 2;
	}
	if (n > SIZE_MAX / size)
		return -EOVERFLOW;
	/* arrp points at a T *, any object pointer type: copy it as bytes rather than read it
	 * through a void ** (same representation, no aliasing question). */
	memcpy(&old, arrp, sizeof(old));
	grown = realloc(old, n * size);
	if (grown == NULL)
		return -ENOMEM;
	memcpy(arrp, &grown, sizeof(grown));
	*cap = n;
	return 0;
}
