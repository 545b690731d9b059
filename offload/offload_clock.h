/* Offload: the clock of the entries' expiries in the maps, and the daemon's.
 *
 * The programs compare an entry's expiry with bpf_ktime_get_ns(): the kernel's own
 * CLOCK_MONOTONIC, whatever time namespace the daemon runs in. The daemon's CLOCK_MONOTONIC
 * (mono_ns) is the kernel's plus the offset of its time namespace (unshare -T, a CRIU
 * restore, a container with a time namespace; 0 outside one). User space keeps its own
 * clock everywhere: an expiry is converted where it enters a map (tgo_channel_set) and where
 * it leaves one (tgo_channel_walk), nowhere else.
 *
 * Any process that sets or reads entries may call these (single-threaded processes: the
 * offset is read once and kept). Compiled with and without HAVE_OFFLOAD (no libbpf here). */
#ifndef TG_OFFLOAD_OFFLOAD_CLOCK_H
#define TG_OFFLOAD_OFFLOAD_CLOCK_H

#include <stdint.h>

/* Where the kernel shows a process's time namespace offsets (Linux 5.6, CONFIG_TIME_NS). */
#define TGO_CLOCK_TIMENS "/proc/self/timens_offsets"

/* Parses the text of a timens_offsets file (lines "<clock> <sec> <nsec>", clock a name or
 * a clock id, nsec in [0, 1e9)): 0 and *off_ns = the monotonic clock's offset in ns, or
 * -EINVAL (a malformed line, no monotonic line, an offset beyond int64 ns) and *off_ns = 0. */
int tgo_clock_parse(const char *text, int64_t *off_ns);

/* The monotonic offset that the file path gives: 0 when it does not exist (a kernel without
 * time namespaces); 0 and one warning (log scope "offload") when it cannot be read or
 * parsed. */
int64_t tgo_clock_read(const char *path);

/* This process's CLOCK_MONOTONIC minus the kernel's: tgo_clock_read(TGO_CLOCK_TIMENS) on
 * the first call, kept for the life of the process. The file shows the offsets of the
 * namespace the process's children are made in (unshare -T and setns change that one, not
 * the caller's own), which is the process's own once it was exec'ed there: how a container
 * runtime or `unshare -T CMD` starts the daemon. master_start calls it before the first
 * fork (and tgo_open), so the workers inherit it and never read the file themselves. */
int64_t tgo_clock_offset(void);

/* An expiry of the daemon's clock as the kernel's (t - off), and back (k + off); both
 * saturate at 0 (long past) and UINT64_MAX (never). */
uint64_t tgo_clock_to_kernel(uint64_t t, int64_t off);
uint64_t tgo_clock_from_kernel(uint64_t k, int64_t off);

#endif
