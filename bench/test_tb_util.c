/* Unit tests for turnbench's helpers: address parsing, RTT quantiles, /proc sampling. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <cmocka.h>

#include "bench/tb.h"

static void test_parse_addr(void **state)
{
	struct sockaddr_in a;

	(void)state;
	assert_int_equal(tb_parse_addr("127.0.0.2:3478", &a), 0);
	assert_int_equal(ntohs(a.sin_port), 3478);
	assert_int_equal(ntohl(a.sin_addr.s_addr), 0x7f000002u);
	assert_int_equal(tb_parse_addr("10.1.2.3", &a), 0);
	assert_int_equal(a.sin_port, 0);
	assert_int_equal(tb_parse_addr("127.0.0.1:65536", &a), -EINVAL);
	assert_int_equal(tb_parse_addr("127.0.0.1:-1", &a), -EINVAL);
	assert_int_equal(tb_parse_addr("127.0.0.1:12x", &a), -EINVAL);
	assert_int_equal(tb_parse_addr(":3478", &a), -EINVAL);
	assert_int_equal(tb_parse_addr("256.0.0.1:1", &a), -EINVAL);
	assert_int_equal(tb_parse_addr("localhost:1", &a), -EINVAL);
}

static void test_hist_quantiles(void **state)
{
	struct tb_hist h;

	(void)state;
	assert_int_equal(tb_hist_init(&h), 0);
	assert_int_equal(tb_hist_quantile(&h, 0.5), -1);
	/* 1000 samples: 1..1000 us. */
	for (uint64_t us = 1; us <= 1000; us++)
		tb_hist_add(&h, us * 1000 + 999);	/* sub-microsecond part truncates */
	assert_int_equal(tb_hist_quantile(&h, 0.0), 1);
	assert_int_equal(tb_hist_quantile(&h, 0.5), 501);
	assert_int_equal(tb_hist_quantile(&h, 0.99), 991);
	assert_int_equal(tb_hist_quantile(&h, 0.999), 1000);
	assert_int_equal(tb_hist_quantile(&h, 1.0), 1000);
	/* Echoes slower than 1 s land in the overflow bucket and read as 1 s. */
	for (int i = 0; i < 2000; i++)
		tb_hist_add(&h, 5000000000ull);
	assert_int_equal(h.over, 2000);
	assert_int_equal(tb_hist_quantile(&h, 0.99), TB_HIST_US);
	tb_hist_free(&h);
	tb_hist_free(&h);	/* idempotent */
	tb_hist_free(NULL);
}

static void test_sample_self(void **state)
{
	struct tb_opts o;
	struct tb_sample s;
	volatile uint64_t x = 0;

	(void)state;
	memset(&o, 0, sizeof(o));
	o.srv[0] = getpid();
	o.n_srv = 1;
	for (uint64_t i = 0; i < 20000000; i++)	/* some CPU time to see */
		x += i;
	assert_int_equal(tb_sample_server(&o, &s), 0);
	assert_true(s.nproc >= 1);
	assert_true(s.rss_kib > 0);
	assert_true(s.pss_kib > 0);
	assert_true(s.cpu_s >= 0);
	if (access("/proc/self/schedstat", R_OK) == 0) /* CONFIG_SCHED_INFO */
		assert_true(s.sched_s > 0);
	assert_true(tb_pid_cpu_s(getpid()) >= 0);
	/* A PID that cannot exist (above the kernel's maximum) is reported as gone. */
	o.srv[0] = 4194305;
	assert_int_equal(tb_sample_server(&o, &s), -ESRCH);
	assert_true(tb_pid_cpu_s(4194305) < 0);
}

static void test_box_parse(void **state)
{
	struct tb_box b;

	(void)state;
	/* user nice system idle iowait irq softirq steal guest guest_nice, at 100 Hz:
	 * busy = 100+20+30+5+40+5 = 200 ticks; idle and iowait stay out. */
	assert_int_equal(tb_box_parse("cpu  100 20 30 900 50 5 40 5 7 0\n", 100, &b), 0);
	assert_true(b.busy_s > 1.999 && b.busy_s < 2.001);
	assert_true(b.softirq_s > 0.399 && b.softirq_s < 0.401);
	assert_true(b.steal_s > 0.049 && b.steal_s < 0.051);
	/* A per-CPU line, a short line and a bad clock are refused, and leave zeros. */
	assert_int_equal(tb_box_parse("cpu0 1 2 3 4 5 6 7 8\n", 100, &b), -EINVAL);
	assert_int_equal(tb_box_parse("cpu  1 2 3 4 5 6 7\n", 100, &b), -EINVAL);
	assert_int_equal(tb_box_parse("cpu  1 2 3 4 5 6 7 8\n", 0, &b), -EINVAL);
	assert_true(b.busy_s == 0 && b.softirq_s == 0);
	/* The live file parses, and the machine has been busy at some point. */
	assert_int_equal(tb_box_sample(&b), 0);
	assert_true(b.busy_s > 0);
}

/* TURN over TCP: ChannelData padded to 4 bytes, STUN by its length, anything else refused. */
static void test_stream_frame(void **state)
{
	uint8_t p[64] = { 0x40, 0x00, 0x00, 0x05 };	/* channel 0x4000, 5 bytes: 4 + 8 */

	(void)state;
	assert_int_equal(tb_stream_frame(p, 3), 0);
	assert_int_equal(tb_stream_frame(p, 11), 0);
	assert_int_equal(tb_stream_frame(p, 12), 12);
	assert_int_equal(tb_stream_frame(p, 40), 12);
	p[3] = 8;					/* no padding: 4 + 8 */
	assert_int_equal(tb_stream_frame(p, 12), 12);
	memcpy(p, (uint8_t[]){ 0x01, 0x13, 0x00, 0x08 }, 4);	/* STUN, 8 attribute bytes */
	assert_int_equal(tb_stream_frame(p, 27), 0);
	assert_int_equal(tb_stream_frame(p, 28), 28);
	p[0] = 0x80;
	assert_int_equal(tb_stream_frame(p, 28), -EBADMSG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_addr),
		cmocka_unit_test(test_hist_quantiles),
		cmocka_unit_test(test_sample_self),
		cmocka_unit_test(test_box_parse),
		cmocka_unit_test(test_stream_frame),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
