/* Fuzz target: the take-over of a state file (shm_image_take) on arbitrary segment images.
 * An input whose header checksum holds gets this boot's id (and is re-sealed), so images
 * from the corpus, written on another machine, reach the record checks; any other input
 * goes in as it is. The destination is a fresh small segment per input; the target checks
 * that a refusal left it empty. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shm/shm_internal.h"
#include "shm/shm_state.h"

/* The CLOCK_MONOTONIC "now" the corpus images were written for (tests/unit/test_state.c). */
#define FUZZ_NOW UINT64_C(5000000000000)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shm_config cfg = { 2, 2, 256, 8 };
	struct shm *dst = NULL;
	struct shm_takeover t;
	struct shm_image img;
	uint8_t *copy = malloc(size ? size : 1);
	uint32_t cursor = 0, idx;

	if (copy == NULL || shm_create(&cfg, "fuzz-state", &dst) < 0) {
		free(copy);
		return 0;
	}
	memcpy(copy, data, size);
	if (size >= sizeof(struct shm_hdr)) {
		struct shm_hdr *h = (struct shm_hdr *)copy;

		if (h->hdr_check == shm_hdr_checksum(h)) {
			shm_boot_id(h->boot_id);
			h->hdr_check = shm_hdr_checksum(h);
		}
	}
	img = (struct shm_image){ .fd = -1, .buf = copy, .size = size };
	memset(&t, 0, sizeof(t));
	if (shm_image_take(dst, &img, FUZZ_NOW, &t) < 0 &&
	    shm_alloc_next_live(dst, &cursor, &idx) == 0)
		abort();	/* a refused image must leave nothing behind */
	shm_destroy(dst);
	free(copy);
	return 0;
}
