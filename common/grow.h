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
 * which derives size from the element type (and see there what it cannot check). first and
 * size must be > 0.
 *
 * Returns 0, -EOVERFLOW when the capacity or its size in bytes would not fit a size_t, or
 * -ENOMEM when realloc fails. On failure *arrp and *cap are left as they were: the old array
 * stays valid and owned by the caller. Any process may call it. */
int grow_array(void *arrp, size_t *cap, size_t want, size_t size, size_t first);

/* grow_array for an array that holds secrets (keys, passwords): the same rule, but the
 * old block is wiped (explicit_bzero over its whole capacity) before it is freed, where
 * realloc would leave a copy in the heap. Same returns; on failure nothing changes. */
int grow_array_wipe(void *arrp, size_t *cap, size_t want, size_t size, size_t first);

/* grow_array for a T *array: pp is its address, &array (a T **), and size is sizeof(**pp).
 * Always write &array.
 *
 * Checked at compile time (GROW_ARRAY_CHECK, no code generated): *pp must be a pointer to a
 * complete type. The compiler refuses a non-pointer (an int, or a T * array passed without
 * its &), the address of a fixed-size array (&a of T a[N], also a struct's array member,
 * which grow_array would hand to realloc) and a void * (no element size).
 *
 * Not checked: for an array of pointers (T = U *, array a U **), passing array instead of
 * &array compiles, grows array[0] as if it were an array of U and takes sizeof(U) as the
 * element size. No type check can catch that (&array of a U * array and array of a U **
 * array have the same type, U **, and &array[i] of such an array is right), and the
 * compilers offer no constant test of the argument's spelling, so it is left to review. */
#define GROW_ARRAY_CHECK(pp)                                                                   \
	((void)sizeof(struct {                                                                 \
		_Static_assert(__builtin_types_compatible_p(__typeof__(*(pp)),                 \
							    __typeof__(&**(pp))),              \
			       "GROW_ARRAY: pp is the address of a pointer, not of an array"); \
		_Static_assert(!__builtin_types_compatible_p(__typeof__(**(pp)), void),        \
			       "GROW_ARRAY: *pp points to a complete type, not to void");      \
		char grow_check_;                                                              \
	}))

#define GROW_ARRAY(pp, capp, want, first) \
	(GROW_ARRAY_CHECK(pp), grow_array((pp), (capp), (want), sizeof(**(pp)), (first)))

#define GROW_ARRAY_WIPE(pp, capp, want, first) \
	(GROW_ARRAY_CHECK(pp), grow_array_wipe((pp), (capp), (want), sizeof(**(pp)), (first)))

#endif
