/* Cross-process quiescent-state-based reclamation (QSBR) over the shared segment.
 *
 * Why our own: liburcu's grace periods only know the reader threads of the calling
 * process, so the master cannot use synchronize_rcu() for memory read by workers. We keep
 * the urcu-qsbr 64-bit algorithm (and DPDK rte_rcu_qsbr's token/poll split), with the
 * reader registry replaced by the slot array and the blocking wait replaced by polling.
 *
 * State
 *   E        hdr->epoch: global epoch, starts at 1, written only by the master.
 *   qs[k]    slot k's quiescent counter, written only by slot k's worker, except that the
 *            master writes 0 when no process runs in the slot (spawn, after waitpid).
 *            qs[k] == 0: offline (holds no snapshot pointer); qs[k] == e > 0: the worker
 *            has held no pointer obtained before it read E == e.
 *   C        hdr->cur_snap: offset of the current snapshot (master only).
 *
 * Worker (reader)                          Master (writer, shm_snap_publish/_reclaim)
 *   online:   qs = load(E); MB             P1 write payload + header of slot S_new
 *   read:     c = load(C); RMB; use c      P2 WMB; C = S_new  (release)
 *   offline:  MB; qs = 0                   P3 MB; t = E + 1; E = t; MB   (token t)
 *   quiescent: e = load(E); if e != qs:    P4 S_old.retire_token = t
 *              MB; qs = e; MB              R1 poll: for every k: q = load(qs[k]);
 *                                                   pending if q != 0 && q < t
 *                                          R2 MB; poison S_old; S_old free
 * (MB = cmm_smp_mb, a full fence; RMB/WMB = cmm_smp_rmb/wmb.)
 *
 * Claim: a reader never dereferences a freed snapshot slot.
 *   Suppose worker k uses slot S_old, obtained by a load c of C that returned S_old, and
 *   the master frees S_old at R2 after retiring it with token t at P4. The load c
 *   happened in an online section that began with the store qs = e (e read from E before
 *   the MB that precedes c), and no later offline/quiescent store happened before the use.
 *   At R1 the master read some value q of qs[k]:
 *   (a) q == 0 or q == a value stored by an earlier section: then the worker's store of e
 *       had not become visible to R1. The master executed P2 ... MB ... R1 and the worker
 *       executed "qs = e; MB; c = load(C)". With full fences on both sides (the
 *       store-buffering/Dekker pattern), at least one side sees the other's store: as R1
 *       did not see qs = e, load c must have seen P2's store, so c returned S_new (or
 *       later), not S_old. Contradiction.
 *   (b) q == e (the section's own store): since c returned S_old, c did not see P2. The
 *       master makes C = S_new visible before E = t (MB in P3), and the worker read E
 *       before c (MB in online). Had it read E == t it would have had to see S_new at c
 *       (message passing), so e <= t - 1 < t and the poll reports "pending". The master
 *       does not free S_old.
 *   (c) q is a value stored later (a later quiescent/offline of the worker): that store is
 *       preceded by an MB after the last use of c, so the use is finished — freeing is
 *       safe (this is the only case in which a nonzero q >= t is observed).
 *   Hence R2 runs only after every use of S_old has completed, and the MB in R2 orders
 *   the master's poison writes after the loads of qs that proved it.
 *
 * Ordering of the offset store vs the epoch bump: C is replaced (P2) BEFORE E is bumped
 *   (P3). A reader that announces the new epoch t has read E == t, so (MB) its later
 *   load of C sees S_new; therefore "qs >= t" certifies that the worker cannot still be
 *   in a section that started with the old offset. Bumping E first would let a reader
 *   announce t and then still load the old C — the token would lie.
 * Comparing q < t, not q < t - 1: a reader that announced t - 1 may have loaded C just
 *   before P2 (case b). The Promela model shm/qsbr.pml finds the off-by-one.
 * Online must store qs before reading C (the MB in online): reading first would let the
 *   master observe an old qs == 0 while the reader already holds S_old (model variant
 *   READ_BEFORE_ONLINE).
 *
 * Why a dead slot is zeroed only after waitpid: a worker that is merely slow, stopped
 *   (SIGSTOP, debugger) or stuck in a loop is still "online" and may use its pointer the
 *   moment it resumes; forcing qs = 0 on a timeout would let R2 free memory it is about
 *   to read (model variant ZERO_WITHOUT_REAP). waitpid() returning the pid is the kernel's
 *   proof that the process executes nothing any more, so its announcement is void and
 *   qs = 0 is true. A stalled worker therefore only delays reclamation; the master sees
 *   it with shm_qsbr_blocker()/shm_qsbr_oldest_pending_ns() and may SIGKILL it, then
 *   reclamation continues after the reap.
 *
 * The counters are 64-bit and never wrap (one bump per publish). Polling never blocks:
 * the master calls shm_snap_reclaim() from a timer and shm_snap_publish() returns -EBUSY
 * when every snapshot slot is still pending.
 */
#include "config.h"

#include <errno.h>

#include "shm/shm_internal.h"

int shm_qsbr_online(struct shm *shm, unsigned slot)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);

	if (s == NULL)
		return rc;
	CMM_STORE_SHARED(s->qs, CMM_LOAD_SHARED(shm_hdr(shm)->epoch));
	cmm_smp_mb();	/* announcement visible before any load of cur_snap */
	return 0;
}

int shm_qsbr_quiescent(struct shm *shm, unsigned slot)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);
	uint64_t e;

	if (s == NULL)
		return rc;
	e = CMM_LOAD_SHARED(shm_hdr(shm)->epoch);
	if (e == CMM_LOAD_SHARED(s->qs))
		return 0;
	cmm_smp_mb();	/* previous snapshot uses done before the announcement */
	CMM_STORE_SHARED(s->qs, e);
	cmm_smp_mb();	/* announcement before the next load of cur_snap */
	return 0;
}

int shm_qsbr_offline(struct shm *shm, unsigned slot)
{
	int rc;
	struct shm_slot *s = shm_slot_rw(shm, slot, &rc);

	if (s == NULL)
		return rc;
	cmm_smp_mb();	/* all snapshot uses complete before we say so */
	CMM_STORE_SHARED(s->qs, 0);
	return 0;
}

int shm_qsbr_start(struct shm *shm, uint64_t *token)
{
	struct shm_hdr *h;
	uint64_t t;

	shm_check_handle(shm);
	if (shm->ro)
		return -EROFS;
	h = shm_hdr(shm);
	cmm_smp_mb();	/* the caller's unpublish (cur_snap store) before the new epoch */
	t = CMM_LOAD_SHARED(h->epoch) + 1;	/* the master is the only writer */
	CMM_STORE_SHARED(h->epoch, t);
	cmm_smp_mb();	/* the epoch before any poll load of qs */
	if (token != NULL)
		*token = t;
	return 0;
}

int shm_qsbr_blocker(const struct shm *shm, uint64_t token, unsigned *slot)
{
	unsigned i;

	shm_check_handle(shm);
	if (slot == NULL)
		return -EINVAL;
	for (i = *slot; i < shm->cfg.n_slots; i++) {
		uint64_t q = CMM_LOAD_SHARED(shm_slot_at(shm, i)->qs);

		if (q != 0 && q < token) {
			*slot = i;
			return 0;
		}
	}
	return -ENOENT;
}

int shm_qsbr_poll(const struct shm *shm, uint64_t token)
{
	unsigned first = 0;

	if (shm_qsbr_blocker(shm, token, &first) == 0)
		return -EAGAIN;
	cmm_smp_mb();	/* the qs loads before whatever the caller frees */
	return 0;
}
