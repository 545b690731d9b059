/* Unknown config keys: the warning, and the "did you mean" when a known key is close. */
#include <ctype.h>
#include <string.h>

#include "conf/conf_internal.h"

#define KEY_CMP_MAX 64 /* longer keys are never a typo of a known one (all are shorter) */

/* Optimal string alignment distance, case-insensitive: insertions, deletions,
 * substitutions and swaps of two neighbours each cost 1 ("listners", "lsiteners" and
 * "Listener" are all 1 or 2 from "listeners"). */
static size_t key_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t d[KEY_CMP_MAX + 1][KEY_CMP_MAX + 1];

	if (la > KEY_CMP_MAX || lb > KEY_CMP_MAX)
		return SIZE_MAX;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			int ca = tolower((unsigned char)a[i - 1]);
			int cb = tolower((unsigned char)b[j - 1]);
			size_t best = d[i - 1][j - 1] + (ca != cb);

			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	}
	return d[la][lb];
}

const char *conf_key_suggest(const char *key, const char *const *known)
{
	const char *best = NULL;
	size_t best_d = SIZE_MAX;

	for (size_t i = 0; known != NULL && known[i] != NULL; i++) {
		size_t d = key_distance(key, known[i]);

		/* Close means at most 2 edits, and fewer than half the known key's length:
		 * "port" is no typo of "host". */
		if (d <= 2 && 2 * d < strlen(known[i]) && d < best_d) {
			best = known[i];
			best_d = d;
		}
	}
	return best;
}

void pctx_unknown_key(struct pctx *p, yaml_node_t *key, const char *path,
		      const char *const *known)
{
	const char *hint = NULL;
	size_t before = p->diags->n;

	if (key->type == YAML_SCALAR_NODE)
		hint = conf_key_suggest((const char *)key->data.scalar.value, known);
	if (hint != NULL)
		pctx_warn(p, key, path, "unknown key (ignored); did you mean `%s`?", hint);
	else
		pctx_warn(p, key, path, "unknown key (ignored)");
	if (p->diags->n > before)
		p->diags->v[p->diags->n - 1].unknown_key = true;
}
