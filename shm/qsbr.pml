/* shm/qsbr.pml: Promela model of the cross-process QSBR of shm/qsbr.c and shm/snap.c.
 *
 * One master (only writer of the epoch, the current offset and the snapshot slots) and
 * NW worker slots. Workers go online, take the current snapshot, use it, pass quiescent
 * states, go offline, or are SIGKILLed; the master publishes, polls grace periods from
 * its timer, reaps dead workers (zeroing their counter) and respawns them into the same
 * slot. Loads and stores are separate steps (a worker can read the epoch, be overtaken
 * by a publish, then store the stale value). Sequentially consistent: this checks the
 * protocol logic; the fences that make the real code behave SC at these points are
 * argued in shm/qsbr.c.
 *
 * Safety: a worker never uses a snapshot slot that was freed (or freed and reused) since
 * it took its reference; the master never frees the current slot.
 *
 * Negative controls (each must produce an assertion violation), -D on `spin -a`:
 *   BUG_TOKEN_MINUS_ONE     poll compares against token - 1
 *   BUG_READ_BEFORE_ONLINE  worker takes the snapshot before announcing online
 *   BUG_BUMP_BEFORE_SWAP    master bumps the epoch before storing the new offset
 *   BUG_ZERO_ON_TIMEOUT     master zeroes a live worker's counter (watchdog, no reap)
 */
#define NW 2
#define NSNAP 3
#define NPUB 4

byte epoch = 1;
byte cur = 0;
byte sstate[NSNAP];   /* 0 free, 1 live, 2 retired */
byte stoken[NSNAP];
byte freegen[NSNAP];  /* +1 each time the slot is freed (poisoned) */
byte qs[NW];          /* 0 = offline */
bool running[NW];
bool dead[NW];        /* killed, not yet reaped */

proctype worker(byte k)
{
	byte e, held, hv;
	bool holding;
online:
	holding = false;
#ifdef BUG_READ_BEFORE_ONLINE
	atomic { held = cur; hv = freegen[held]; holding = true };
	e = epoch; atomic { qs[k] = e; e = 0 };
#else
	e = epoch; atomic { qs[k] = e; e = 0 };
	atomic { held = cur; hv = freegen[held]; holding = true };
#endif
	do
	:: holding -> assert(freegen[held] == hv)          /* use the held snapshot */
	:: atomic { holding = false; held = 0; hv = 0 };    /* quiescent state ... */
	   e = epoch; atomic { qs[k] = e; e = 0 };
	   atomic { held = cur; hv = freegen[held]; holding = true }   /* ... new reference */
	:: atomic { qs[k] = 0; holding = false; held = 0; hv = 0 }; /* offline (epoll_wait) */
	   goto online
	:: atomic { running[k] = false; dead[k] = true;     /* kill -9 */
	            holding = false; held = 0; hv = 0; e = 0 };
	   goto killed
	od;
killed:
	(running[k]);                                       /* respawned into the slot */
	goto online
}

active proctype master()
{
	byte npub = 0, n, old, t, i, j;
	bool blocked;

	sstate[0] = 1;
	i = 0;
	do
	:: i < NW -> running[i] = true; run worker(i); i++
	:: else -> break
	od;
	do
	:: npub < NPUB ->                                   /* publish */
		n = 0;
		do
		:: n < NSNAP && sstate[n] != 0 -> n++
		:: else -> break
		od;
		if
		:: n < NSNAP ->
			sstate[n] = 1;                      /* payload written */
			old = cur;
#ifdef BUG_BUMP_BEFORE_SWAP
			t = epoch + 1; epoch = t;
			cur = n;
#else
			cur = n;
			t = epoch + 1; epoch = t;
#endif
			atomic { stoken[old] = t; sstate[old] = 2; npub++; n = 0; old = 0; t = 0 }
		:: else -> n = 0                            /* -EBUSY: retry later */
		fi
	:: true ->                                          /* reclaim timer */
		i = 0;
		do
		:: i < NSNAP && sstate[i] == 2 ->
			blocked = false;
			j = 0;
			do
			:: j < NW ->
#ifdef BUG_TOKEN_MINUS_ONE
				if :: qs[j] != 0 && qs[j] < stoken[i] - 1 -> blocked = true
#else
				if :: qs[j] != 0 && qs[j] < stoken[i] -> blocked = true
#endif
				   :: else -> skip
				fi;
				j++
			:: else -> break
			od;
			if
			:: !blocked ->
				assert(i != cur);
				freegen[i]++; sstate[i] = 0; stoken[i] = 0
			:: else -> skip
			fi;
			atomic { i++; j = 0; blocked = false }
		:: i < NSNAP && sstate[i] != 2 -> i++
		:: else -> i = 0; break
		od
	:: i = 0;                                           /* SIGCHLD: waitpid, then zero */
		do
		:: i < NW && dead[i] ->
			atomic { qs[i] = 0; dead[i] = false; running[i] = true; i = 0 }; break
		:: i < NW && !dead[i] -> i++
		:: else -> i = 0; break
		od
#ifdef BUG_ZERO_ON_TIMEOUT
	:: running[0] && qs[0] != 0 -> qs[0] = 0            /* "stalled too long" */
#endif
	od
}
