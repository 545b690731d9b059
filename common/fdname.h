/* The names stream connections carry in systemd's file descriptor store (FDNAME=): what a
 * start after a crash needs to give each socket back to its allocation.
 *
 *   tg1.KIND.SLOT.REC.ID.FLAGS.LISTENER
 *
 * KIND one letter (c: a TURN-TCP client connection, p: an RFC 6062 peer connection bound
 * to a data connection, d: that data connection), SLOT the worker slot, REC the record of
 * the allocation in the state file's table, ID the CONNECTION-ID (0 for c), FLAGS the
 * PARK_F_* bits in hex, LISTENER the listener's name (c only, empty otherwise) with every
 * byte outside '!'..'~', and ':' and '%', written %XX (systemd refuses ':' and control
 * characters in a name). A name is unique while its connection lives: one TURN-TCP
 * connection per record, one peer connection per CONNECTION-ID. Both processes may call
 * everything here. */
#ifndef TG_COMMON_FDNAME_H
#define TG_COMMON_FDNAME_H

#include <stddef.h>
#include <stdint.h>

#include "common/park.h"

/* systemd's FDNAME limit. */
#define FDNAME_MAX 255u

/* Writes the name of a connection of kind (PARK_TCONN, PARK_TPEER, PARK_TDATA) to buf
 * (cap bytes, NUL-terminated). listener: NULL or "" except for PARK_TCONN. Returns 0,
 * -EINVAL (another kind), -ENAMETOOLONG (more than FDNAME_MAX or cap - 1). */
int fdname_make(char *buf, size_t cap, enum park_kind kind, unsigned slot, uint32_t rec,
		uint32_t id, uint32_t flags, const char *listener);

/* Parses name into a park header (kind, slot, rec_idx, id, flags, listener; the rest
 * zero, magic and version set). Returns 0, or -EBADMSG when name is not one of ours. */
int fdname_parse(const char *name, struct park_hdr *h);

#endif
