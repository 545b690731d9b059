/* Unit tests: the growth rule of growable arrays (common/grow.h). realloc is wrapped
 * (-Wl,--wrap=realloc) so that a test can make it fail and count its calls. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common/grow.h"

void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);

static int realloc_calls;
static int realloc_fail;

void *__wrap_realloc(void *p, size_t n)
{
	realloc_calls++;
	if (realloc_fail)
		return NULL;
	return __real_realloc(p, n);
}

static int setup(void **state)
{
	(void)state;
	realloc_calls = 0;
	realloc_fail = 0;
	return 0;
}

static void test_growth(void **state)
{
	uint32_t *v = NULL, *before;
	size_t cap = 0;

	(void)state;
	assert_int_equal(GROW_ARRAY(&v, &cap, 1, 4), 0);
	assert_non_null(v);
	assert_int_equal(cap, 4);
	for (uint32_t i = 0; i < 4; i++)
		v[i] = i * 7;
	/* Room enough: nothing moves, realloc is not called. */
	before = v;
	assert_int_equal(GROW_ARRAY(&v, &cap, 4, 4), 0);
	assert_ptr_equal(v, before);
	assert_int_equal(cap, 4);
	assert_int_equal(realloc_calls, 1);
	/* One more: doubles once. */
	assert_int_equal(GROW_ARRAY(&v, &cap, 5, 4), 0);
	assert_int_equal(cap, 8);
	/* Far more: doubles until it fits, in one realloc. */
	assert_int_equal(GROW_ARRAY(&v, &cap, 33, 4), 0);
	assert_int_equal(cap, 64);
	assert_int_equal(realloc_calls, 3);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(v[i], i * 7);
	v[63] = 1;	/* the whole capacity is there (the sanitizer build checks) */
	free(v);
}

static void test_overflow_refused(void **state)
{
	/* A non-NULL array that realloc would have to move: a real uint64_t, never freed (the
	 * refusals come before any realloc). */
	static uint64_t dummy;
	uint64_t *v = &dummy;
	size_t cap = SIZE_MAX / 2 + 1;
	uint8_t *b = NULL;
	size_t bcap = 4;

	(void)state;
	/* Doubling the count would wrap. */
	assert_int_equal(GROW_ARRAY(&v, &cap, cap + 1, 16), -EOVERFLOW);
	assert_ptr_equal(v, &dummy);
	assert_int_equal(cap, SIZE_MAX / 2 + 1);
	/* The count fits, its size in bytes does not. */
	cap = 4;
	assert_int_equal(GROW_ARRAY(&v, &cap, SIZE_MAX / 8 + 1, 16), -EOVERFLOW);
	assert_int_equal(cap, 4);
	assert_int_equal(grow_array(&b, &bcap, 5, SIZE_MAX / 4, 1), -EOVERFLOW);
	assert_null(b);
	assert_int_equal(bcap, 4);
	assert_int_equal(realloc_calls, 0);
}

static void test_failure_keeps_array(void **state)
{
	char *v = NULL, *before;
	size_t cap = 0;

	(void)state;
	assert_int_equal(GROW_ARRAY(&v, &cap, 3, 2), 0);
	assert_int_equal(cap, 4);
	v[0] = 'a';
	v[3] = 'd';
	before = v;
	realloc_fail = 1;
	assert_int_equal(GROW_ARRAY(&v, &cap, 5, 2), -ENOMEM);
	assert_int_equal(realloc_calls, 2);
	assert_ptr_equal(v, before);
	assert_int_equal(cap, 4);
	assert_int_equal(v[0], 'a');
	assert_int_equal(v[3], 'd');
	/* The first allocation failing leaves the caller's NULL and 0. */
	{
		int *e = NULL;
		size_t ecap = 0;

		assert_int_equal(GROW_ARRAY(&e, &ecap, 1, 8), -ENOMEM);
		assert_null(e);
		assert_int_equal(ecap, 0);
	}
	realloc_fail = 0;
	assert_int_equal(GROW_ARRAY(&v, &cap, 5, 2), 0);
	assert_int_equal(cap, 8);
	assert_int_equal(v[3], 'd');
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_growth, setup),
		cmocka_unit_test_setup(test_overflow_refused, setup),
		cmocka_unit_test_setup(test_failure_keeps_array, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
