/* A growable array's one growth rule: double the capacity until the wanted count fits. */
#ifndef TG_COMMON_GROW_H
#define TG_COMMON_GROW_H

#include <stddef.h>

/* Makes the array *arrp (of *cap elements of size bytes each) hold at least want elements.
 * When *cap already does, nothing changes. Otherwise the capacity doubles, starting from *cap
 * or, when *cap is 0, from first, until it holds want; the array is reallocated to that many
 * elements (the first *cap elements kept) and *arrp and *cap are updated.
 *
 * arrp is the address of the caller's pointer (a T ** passed as void *); use GROW_ARRAY,
 * which checks that and derives size from the element type. first and size must be > 0.
 *
 * Returns 0, -EOVERFLOW when the capacity or its size in bytes would not fit a size_t, or
 * -ENOMEM when realloc fails. On failure *arrp and *cap are left as they were: the old array
 * stays valid and owned by the caller. Any process may call it. */
int grow_array(void *arrp, size_t *cap, size_t want, size_t size, size_t first);

/* grow_array for a T *array: pp is a T ** (the compiler refuses a T *), size is sizeof(T). */
#define GROW_ARRAY(pp, capp, want, first) \
	grow_array((pp), (capp), (want), sizeof(**(pp)), (first))

#endif
