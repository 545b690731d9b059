/* Draws ports with the C harness for test_port_reserve.py: `port_draw late|any N` prints each
 * port drawn (0 when none), `port_draw reserve PORT` 1 when it reserved PORT and 0 when not,
 * one line each, then holds its reservations until its stdin closes. */
#include "config.h"

#include "tests/integration/harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	int n = argc == 3 ? atoi(argv[2]) : 0;

	if (n < 1 || n > 65535 ||
	    (strcmp(argv[1], "late") != 0 && strcmp(argv[1], "any") != 0 &&
	     strcmp(argv[1], "reserve") != 0)) {
		fprintf(stderr, "usage: port_draw late|any N | port_draw reserve PORT\n");
		return 2;
	}
	if (strcmp(argv[1], "reserve") == 0)
		printf("%d\n", harness_port_reserve((uint16_t)n) == 0);
	else
		for (int i = 0; i < n; i++)
			printf("%u\n", strcmp(argv[1], "late") == 0 ? harness_free_port_late()
								    : harness_free_port());
	fflush(stdout);
	while (getchar() != EOF)
		;
	return 0;
}
