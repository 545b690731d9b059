/* Unit tests: the growth rule of growable arrays (common/grow.h). realloc, malloc and free
 * are wrapped (-Wl,--wrap=...) so that a test can make them fail, count realloc's calls and
 * look at a block as it is freed. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
void __real_free(void *p);
void __wrap_free(void *p);

static int malloc_fail;
static const void *watch;      /* a block whose bytes __wrap_free looks at */
static size_t watch_len;
static int watch_freed, watch_zero;

void *__wrap_malloc(size_t n)
{
	return malloc_fail ? NULL : __real_malloc(n);
}

void __wrap_free(void *p)
{
	if (p != NULL && p == watch) {
		const unsigned char *b = p;

		watch_freed = 1;
		watch_zero = 1;
		for (size_t i = 0; i < watch_len; i++)
			watch_zero &= b[i] == 0;
	}
	__real_free(p);
}

static int setup(void **state)
{
	(void)state;
	realloc_calls = 0;
	realloc_fail = 0;
	malloc_fail = 0;
	watch = NULL;
	watch_freed = watch_zero = 0;
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

/* A failed allocation changes nothing, for each function and the allocator it uses: the
 * first allocation failing leaves the caller's NULL and 0; a growth failing leaves the array,
 * its capacity and its bytes; the next one grows it. */
struct fail_case {
	int wipe;		/* GROW_ARRAY_WIPE, else GROW_ARRAY */
	int *fail;		/* the allocator it uses: realloc_fail or malloc_fail */
	int reallocs;		/* realloc's calls in all */
};

static struct fail_case realloc_fails = {0, &realloc_fail, 4};
static struct fail_case malloc_fails = {1, &malloc_fail, 0};

static int grow_bytes(const struct fail_case *fc, char **v, size_t *cap, size_t want)
{
	return fc->wipe ? GROW_ARRAY_WIPE(v, cap, want, 2) : GROW_ARRAY(v, cap, want, 2);
}

static void test_failure_keeps_array(void **state)
{
	const struct fail_case *fc = *state;
	char *v = NULL, *before;
	size_t cap = 0;

	*fc->fail = 1;
	assert_int_equal(grow_bytes(fc, &v, &cap, 1), -ENOMEM);
	assert_null(v);
	assert_int_equal(cap, 0);
	*fc->fail = 0;
	assert_int_equal(grow_bytes(fc, &v, &cap, 3), 0);
	assert_int_equal(cap, 4);
	memcpy(v, "k3y", 4);
	before = v;
	*fc->fail = 1;
	assert_int_equal(grow_bytes(fc, &v, &cap, 5), -ENOMEM);
	*fc->fail = 0;
	assert_ptr_equal(v, before);
	assert_int_equal(cap, 4);
	assert_string_equal(v, "k3y");
	assert_int_equal(grow_bytes(fc, &v, &cap, 5), 0);
	assert_int_equal(cap, 8);
	assert_string_equal(v, "k3y");
	assert_int_equal(realloc_calls, fc->reallocs);
	free(v);
}

/* GROW_ARRAY_WIPE: the same rule, the old block wiped before it is freed, never realloc. */
static void test_wipe(void **state)
{
	char *v = NULL;
	size_t cap = 0;

	(void)state;
	assert_int_equal(GROW_ARRAY_WIPE(&v, &cap, 3, 4), 0);
	assert_int_equal(cap, 4);
	memcpy(v, "k3y", 4);
	watch = v;
	watch_len = 4;
	assert_int_equal(GROW_ARRAY_WIPE(&v, &cap, 5, 4), 0);
	assert_int_equal(cap, 8);
	assert_string_equal(v, "k3y");
	assert_true(watch_freed);
	assert_true(watch_zero);
	assert_int_equal(realloc_calls, 0);
	assert_int_equal(GROW_ARRAY_WIPE(&v, &cap, 8, 4), 0);	/* room: nothing moves */
	assert_int_equal(cap, 8);
	watch = NULL;
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_growth, setup),
		cmocka_unit_test_setup(test_overflow_refused, setup),
		{"test_failure_keeps_array (GROW_ARRAY, realloc fails)", test_failure_keeps_array,
		 setup, NULL, &realloc_fails},
		{"test_failure_keeps_array (GROW_ARRAY_WIPE, malloc fails)", test_failure_keeps_array,
		 setup, NULL, &malloc_fails},
		cmocka_unit_test_setup(test_wipe, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
