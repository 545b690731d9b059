/* Listener slots: a stable number per listener name, for every per-listener figure in
 * the shared segment (the slots' counters, the allocation records' listener_idx, the
 * bandwidth drops) and in the kernel's counter map.
 *
 * A snapshot orders its listeners as the file does, and a reload may remove, add or
 * reorder them; a figure indexed by that order would move to another listener. The
 * master instead gives each name a slot, 0..SHM_MAX_LISTENERS-1, kept in a table in the
 * segment (so a state file carries it across restarts and upgrades, shm/shm_state.h),
 * and writes each listener's slot into the snapshot (snap_listener.slot). As nginx keys
 * its shared zones by name across reloads (ngx_cycle.c, shm_zone_found).
 *
 * A slot is FREE, USED (a listener of the current configuration has it) or RETIRED (its
 * listener was removed; records or in-flight datagrams may still name it). A retired
 * slot is freed at a later publish (never the one that removed its name: a worker still
 * on the previous snapshot may yet make a record on it) once no allocation record names
 * it any more; a freed slot's counters
 * (every worker slot's, and the bandwidth drops) are zeroed before it is given to another
 * name, so a new listener never inherits a removed one's figures. A name that comes back
 * while its slot is still retired gets the same slot back, figures and all.
 *
 * Only the master writes the table. Workers take their listeners' slots from the snapshot
 * and read the table only for a slot that a LIVE record of theirs names (shm_lslot_name:
 * the name and state of a record's listener when it ends without its allocation,
 * worker/adopt.c), which is never freed meanwhile (see above), so its name is stable.
 * Functions return 0 or a negative errno.
 */
#ifndef TG_SHM_SHM_LSLOT_H
#define TG_SHM_SHM_LSLOT_H

#include <stddef.h>
#include <stdint.h>

#include "shm/shm.h"

#define SHM_LSLOT_NAME_MAX 112u  /* bytes of a name kept for display (NUL included) */
#define SHM_LSLOT_NONE 0xffffu   /* no slot: the listener is not counted */

enum shm_lslot_state {
	SHM_LSLOT_FREE = 0,
	SHM_LSLOT_USED,
	SHM_LSLOT_RETIRED,
};

/* Master: gives each of names[0..n) its slot (out[i]), in one pass: names that had a slot
 * keep it, names no longer present are RETIRED, slots retired earlier that no record
 * names are freed (counters zeroed), new names take the lowest free slot; a name finding none gets
 * SHM_LSLOT_NONE (counted nowhere, as listeners beyond the 64th always were). *freed
 * (may be NULL) gets bit i set for each slot i freed by this call, so the caller may
 * reset what it keeps per slot outside the segment (the kernel's counters).
 * Returns 0 or -EINVAL. */
int shm_lslot_assign(struct shm *shm, const char *const *names, size_t n, uint16_t *out,
		     uint64_t *freed);

/* The slot the name holds (USED), into *slot. Returns 0, -ENOENT (none), -EINVAL. */
int shm_lslot_find(const struct shm *shm, const char *name, uint32_t *slot);

/* The name slot had (USED or RETIRED), copied into buf (truncated to cap, NUL ended);
 * *state gets the slot's state (may be NULL). Returns 0, -ENOENT (free), -EINVAL. */
int shm_lslot_name(const struct shm *shm, uint32_t slot, char *buf, size_t cap,
		   enum shm_lslot_state *state);

#endif
