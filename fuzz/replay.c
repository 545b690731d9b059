/* Replays a checked-in libFuzzer corpus through a fuzz target as an ordinary test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef FUZZ_CORPUS
#error "FUZZ_CORPUS must name the corpus directory"
#endif

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return -1;
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (GROW_ARRAY(&buf, &cap, len + 1, 4096) < 0) {
			free(buf);
			fclose(f);
			return -1;
		}
		size_t n = fread(buf + len, 1, cap - len, f);
		if (n == 0)
			break;
		len += n;
	}
	fclose(f);
	/* Copy into an exact-size buffer so ASan catches reads past the input. */
	uint8_t *exact = malloc(len ? len : 1);
	if (exact == NULL) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : FUZZ_CORPUS;
	DIR *d = opendir(dir);
	if (d == NULL) {
		fprintf(stderr, "replay: cannot open corpus %s\n", dir);
		return 1;
	}
	int n = 0, failed = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (replay_file(path) != 0) {
			fprintf(stderr, "replay: cannot read %s\n", path);
			failed++;
		}
		n++;
	}
	closedir(d);
	printf("replay: %d inputs from %s, %d unreadable\n", n, dir, failed);
	if (n == 0) {
		fprintf(stderr, "replay: empty corpus\n");
		return 1;
	}
	return failed ? 1 : 0;
}
