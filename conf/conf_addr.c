/* Address grammar for configs: IPs, prefixes, endpoints with port ranges, canonical forms, special
 * ranges. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf_internal.h"

int conf_parse_ip(const char *s, int *family, uint8_t addr[16])
{
	memset(addr, 0, 16);
	if (inet_pton(AF_INET, s, addr) == 1) {
		*family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, s, addr) == 1) {
		*family = AF_INET6;
		return 0;
	}
	return -EINVAL;
}

bool conf_ip_unicast(int family, const uint8_t addr[16])
{
	if (family == AF_INET)
		return addr[0] != 0 && addr[0] < 224;
	return addr[0] != 0xff && memcmp(addr, (const uint8_t[16]){ 0 }, 16) != 0;
}

static void prefix_mask(struct conf_prefix *p, bool *host_bits)
{
	size_t nbytes = p->family == AF_INET ? 4 : 16;
	for (size_t i = 0; i < nbytes; i++) {
		unsigned keep = p->len >= (i + 1) * 8 ? 8 : p->len > i * 8 ? p->len - i * 8 : 0;
		uint8_t mask = keep ? (uint8_t)(0xffu << (8 - keep)) : 0;
		if ((p->addr[i] & (uint8_t)~mask) && host_bits)
			*host_bits = true;
		p->addr[i] &= mask;
	}
}

/* Embedded-IPv4 forms a peer can use to reach an IPv4 host through an IPv6 address.
 * off: where the IPv4 part starts; plen: bits that identify the form. */
struct v4_embed {
	uint8_t pfx[12];
	uint8_t plen, off;
};

static const struct v4_embed embeds[] = {
	{ { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff }, 96, 12 },       /* ::ffff:0:0/96 mapped */
	{ { 0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 }, 96, 12 }, /* 64:ff9b::/96 NAT64 */
	{ { 0x20, 0x02 }, 16, 2 },                                      /* 2002::/16 6to4 */
	{ { 0 }, 96, 12 },                                              /* ::/96 compatible */
};

static bool bits_equal(const uint8_t *a, const uint8_t *b, unsigned bits)
{
	unsigned full = bits / 8, rem = bits % 8;
	uint8_t mask;
	if (memcmp(a, b, full) != 0)
		return false;
	if (rem == 0)
		return true;
	mask = (uint8_t)(0xffu << (8 - rem));
	return (a[full] & mask) == (b[full] & mask);
}

/* Which embedding (if any) an IPv6 address uses. :: and ::1 are left as IPv6: they are
 * special themselves and would otherwise read as 0.0.0.0 / 0.0.0.1 (also special). */
static const struct v4_embed *embed_of(const uint8_t a[16])
{
	for (size_t i = 0; i < sizeof(embeds) / sizeof(embeds[0]); i++)
		if (bits_equal(a, embeds[i].pfx, embeds[i].plen))
			return &embeds[i];
	return NULL;
}

void conf_canon_addr(int *family, uint8_t addr[16])
{
	const struct v4_embed *e;
	uint8_t v4[4];
	if (*family != AF_INET6)
		return;
	e = embed_of(addr);
	if (e == NULL)
		return;
	memcpy(v4, addr + e->off, 4);
	if (e == &embeds[3]) {
		/* compatible form: keep :: and ::1 as IPv6 */
		static const uint8_t zero3[3];
		if (memcmp(v4, zero3, 3) == 0 && v4[3] <= 1)
			return;
	}
	memset(addr, 0, 16);
	memcpy(addr, v4, 4);
	*family = AF_INET;
}

/* A prefix converts to IPv4 only when it fixes the whole embedding prefix. */
void conf_canon_prefix(struct conf_prefix *p)
{
	const struct v4_embed *e;
	unsigned v4len;
	int fam = AF_INET6;
	uint8_t a[16];
	if (p->family != AF_INET6)
		return;
	e = embed_of(p->addr);
	if (e == NULL || p->len < e->off * 8 || (e->off == 12 && p->len < 96))
		return;
	v4len = p->len - e->off * 8u;
	if (v4len > 32) /* 6to4 /48+ carries subnet bits after the IPv4 part */
		v4len = 32;
	memcpy(a, p->addr, 16);
	conf_canon_addr(&fam, a);
	if (fam != AF_INET)
		return;
	p->family = AF_INET;
	memcpy(p->addr, a, 16);
	p->len = (uint8_t)v4len;
	prefix_mask(p, NULL);
}

int conf_parse_prefix(const char *s, struct conf_prefix *out, bool *host_bits)
{
	char ip[INET6_ADDRSTRLEN + 8];
	const char *slash = strchr(s, '/');
	size_t iplen = slash ? (size_t)(slash - s) : strlen(s);
	char *ipp = ip;
	unsigned max;
	if (iplen >= sizeof(ip) || iplen == 0)
		return -EINVAL;
	memcpy(ip, s, iplen);
	ip[iplen] = '\0';
	if (ip[0] == '[' && iplen > 2 && ip[iplen - 1] == ']') { /* ours: [v6] form */
		ip[iplen - 1] = '\0';
		ipp++;
	}
	memset(out, 0, sizeof(*out));
	if (conf_parse_ip(ipp, &out->family, out->addr) != 0)
		return -EINVAL;
	max = out->family == AF_INET ? 32 : 128;
	out->len = (uint8_t)max;
	if (slash != NULL) {
		const char *l = slash + 1;
		size_t n = strspn(l, "0123456789");
		unsigned v;
		if (n == 0 || n > 3 || l[n] != '\0')
			return -EINVAL;
		v = (unsigned)atoi(l);
		if (v > max)
			return -ERANGE;
		out->len = (uint8_t)v;
	}
	if (host_bits)
		*host_bits = false;
	prefix_mask(out, host_bits);
	conf_canon_prefix(out);
	return 0;
}

static int parse_port(const char *s, size_t n, uint16_t *out)
{
	unsigned v = 0;
	if (n == 0 || n > 5)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -EINVAL;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > 65535)
		return -ERANGE;
	*out = (uint16_t)v;
	return 0;
}

/* A port of a range as strconv.Atoi reads it: decimal digits, any value below 10^18. */
static int range_num(const char *s, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	if (n == 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -EINVAL;
		if (i >= 18)
			return -ERANGE;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

/* Splits "<addr>:<min-max>" (STUNner's literal angle brackets, the last ":<" of the
 * text, as stunnerd's greedy regexp finds it). stunnerd admits any numbers: an end past
 * 65535 is 65535 in effect (err says so, rc 0) and a range that holds no port matches
 * nothing (-ENOENT, err says so). */
int conf_split_port_range(const char *s, size_t *iplen, uint16_t *min, uint16_t *max,
			  bool *has_range, char *err, size_t errlen)
{
	size_t len = strlen(s);
	const char *lt, *r, *dash, *end;
	uint64_t lo = 0, hi = 0;
	int rl, rh;
	*iplen = len;
	*has_range = false;
	*min = 1;
	*max = 65535;
	err[0] = '\0';
	if (len == 0 || s[len - 1] != '>')
		return 0;
	lt = strstr(s, ":<");
	while (lt != NULL && strstr(lt + 2, ":<") != NULL)
		lt = strstr(lt + 2, ":<");
	if (lt == NULL) {
		snprintf(err, errlen, "malformed port range (expected ADDR:<MIN-MAX>)");
		return -EINVAL;
	}
	r = lt + 2;
	dash = strchr(r, '-');
	end = s + len - 1;
	rl = dash && dash < end ? range_num(r, (size_t)(dash - r), &lo) : -EINVAL;
	rh = dash && dash < end ? range_num(dash + 1, (size_t)(end - dash - 1), &hi) : -EINVAL;
	if (rl == -EINVAL || rh == -EINVAL) {
		snprintf(err, errlen, "malformed port range '%s' (expected :<MIN-MAX>)", lt);
		return -EINVAL;
	}
	if (rl != 0 || rh != 0) {
		snprintf(err, errlen, "port range '%s' is out of range (0..65535)", lt);
		return -EINVAL;
	}
	*iplen = (size_t)(lt - s);
	*has_range = true;
	if (lo > hi || lo > 65535) {
		snprintf(err, errlen,
			 "port range %llu-%llu holds no port (the endpoint matches "
			 "nothing, as in stunnerd)",
			 (unsigned long long)lo, (unsigned long long)hi);
		return -ENOENT;
	}
	if (hi > 65535)
		snprintf(err, errlen,
			 "port range end %llu is past 65535 (read as 65535, as "
			 "stunnerd matches it)",
			 (unsigned long long)hi);
	*min = (uint16_t)lo;
	*max = (uint16_t)(hi > 65535 ? 65535 : hi);
	return 0;
}

int conf_parse_endpoint(const char *s, struct conf_endpoint *ep, char *err, size_t errlen)
{
	size_t iplen;
	bool has_range, host_bits = false;
	int split = conf_split_port_range(s, &iplen, &ep->port_min, &ep->port_max, &has_range, err,
					  errlen);
	char buf[INET6_ADDRSTRLEN + 16];
	int rc;
	if (split == -EINVAL)
		return -EINVAL;
	if (iplen == 0 || iplen >= sizeof(buf)) {
		snprintf(err, errlen,
			 "'%s' is not an endpoint (expected IP, IP/LEN, optionally "
			 "followed by :<MIN-MAX>)",
			 s);
		return -EINVAL;
	}
	memcpy(buf, s, iplen);
	buf[iplen] = '\0';
	rc = conf_parse_prefix(buf, &ep->prefix, &host_bits);
	if (rc == -ERANGE) {
		snprintf(err, errlen, "prefix length of '%s' is out of range (0..%d)", buf,
			 strchr(buf, ':') ? 128 : 32);
		return -EINVAL;
	}
	if (rc != 0) {
		snprintf(err, errlen,
			 "'%s' is not an endpoint (expected IP, IP/LEN, optionally "
			 "followed by :<MIN-MAX>)",
			 s);
		return -EINVAL;
	}
	if (split != 0)
		return split; /* the message in err says why it matches nothing */
	if (host_bits && err[0] == '\0')
		snprintf(err, errlen, "'%s' has host bits set (matching as its network prefix)",
			 buf);
	return 0;
}

bool conf_valid_hostname(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 253)
		return false;
	for (const char *c = s; *c; c++)
		if (!isalnum((unsigned char)*c) && *c != '-' && *c != '.' && *c != '_' && *c != ':')
			return false;
	return true;
}

void conf_sockaddr_set(struct sockaddr_storage *ss, int fam, const uint8_t a[16])
{
	memset(ss, 0, sizeof(*ss));
	if (fam == AF_INET) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, a, 4);
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, a, 16);
	}
}

/* "IP", "IP:PORT", "[V6]" or "[V6]:PORT"; port 0 when absent. */
int conf_parse_hostport(const char *s, struct sockaddr_storage *out)
{
	char ip[INET6_ADDRSTRLEN + 2];
	const char *port = NULL;
	size_t n;
	int fam;
	uint8_t a[16];
	uint16_t pv = 0;
	if (s[0] == '[') {
		const char *e = strchr(s, ']');
		if (e == NULL)
			return -EINVAL;
		n = (size_t)(e - s - 1);
		if (n >= sizeof(ip))
			return -EINVAL;
		memcpy(ip, s + 1, n);
		if (e[1] == ':')
			port = e + 2;
		else if (e[1] != '\0')
			return -EINVAL;
	} else {
		const char *c = strchr(s, ':');
		bool v4ish = c != NULL && strchr(c + 1, ':') == NULL;
		n = v4ish ? (size_t)(c - s) : strlen(s);
		if (n >= sizeof(ip))
			return -EINVAL;
		memcpy(ip, s, n);
		if (v4ish)
			port = c + 1;
	}
	ip[n] = '\0';
	if (conf_parse_ip(ip, &fam, a) != 0)
		return -EINVAL;
	if (port != NULL && (parse_port(port, strlen(port), &pv) != 0 || pv == 0))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	if (fam == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)out;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(pv);
		memcpy(&sin->sin_addr, a, 4);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(pv);
		memcpy(&sin6->sin6_addr, a, 16);
	}
	return 0;
}

int conf_addr_canon(const struct sockaddr *sa, int *family, uint8_t addr[16])
{
	memset(addr, 0, 16);
	if (sa->sa_family == AF_INET) {
		memcpy(addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		*family = AF_INET;
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		*family = AF_INET6;
		conf_canon_addr(family, addr);
		return 0;
	}
	return -EAFNOSUPPORT;
}

/* The never-admitted ranges: the IANA IPv4 and IPv6 Special-Purpose Address Registries
 * (RFC 6890 and successors), the rest of the IPv6 space outside global unicast, and the
 * cloud metadata addresses. Left out on purpose, so that ordinary routes admit them: the
 * private ranges where pod networks live (10/8, 172.16/12, 192.168/16, 100.64/10 shared
 * address space, fc00::/7 unique local). An address takes the category of the longest
 * range that holds it (169.254.169.254 is metadata, 169.254.0.1 link-local), so a cluster
 * that admits one category by name (admit_special) never admits a neighbour's. Kept in
 * docs/configuration.md's table (tests/unit/test_conf.c walks every entry). */
struct special {
	uint8_t family;
	uint8_t len;
	uint8_t cat; /* one CONF_SPECIAL_* bit */
	uint8_t addr[16];
};

#define V4(a, b, c, d) { a, b, c, d }
#define SP4(cat, a, b, c, d, len) { AF_INET, len, CONF_SPECIAL_##cat, V4(a, b, c, d) }
#define SP6(cat, len, ...) { AF_INET6, len, CONF_SPECIAL_##cat, { __VA_ARGS__ } }

static const struct special specials[] = {
	SP4(RESERVED, 0, 0, 0, 0, 8),               /* "this network", RFC 791 */
	SP4(LOOPBACK, 127, 0, 0, 0, 8),             /* RFC 1122 */
	SP4(LINK_LOCAL, 169, 254, 0, 0, 16),        /* RFC 3927 */
	SP4(PROTOCOL, 192, 0, 0, 0, 24),            /* IETF protocol assignments, RFC 6890 */
	SP4(DOCUMENTATION, 192, 0, 2, 0, 24),       /* TEST-NET-1, RFC 5737 */
	SP4(PROTOCOL, 192, 31, 196, 0, 24),         /* AS112-v4, RFC 7535 */
	SP4(PROTOCOL, 192, 52, 193, 0, 24),         /* AMT, RFC 7450 */
	SP4(PROTOCOL, 192, 88, 99, 0, 24),          /* 6to4 relay anycast, RFC 7526 */
	SP4(PROTOCOL, 192, 175, 48, 0, 24),         /* AS112 direct delegation, RFC 7534 */
	SP4(DOCUMENTATION, 198, 18, 0, 0, 15),      /* benchmarking, RFC 2544 */
	SP4(DOCUMENTATION, 198, 51, 100, 0, 24),    /* TEST-NET-2, RFC 5737 */
	SP4(DOCUMENTATION, 203, 0, 113, 0, 24),     /* TEST-NET-3, RFC 5737 */
	SP4(MULTICAST, 224, 0, 0, 0, 4),            /* RFC 5771 */
	SP4(RESERVED, 240, 0, 0, 0, 4),             /* RFC 1112, with 255.255.255.255 */
	/* cloud metadata */
	SP4(METADATA, 169, 254, 169, 254, 32),      /* AWS, GCP, Azure, OCI, DO, OpenStack */
	SP4(METADATA, 169, 254, 170, 2, 32),        /* AWS ECS task metadata, credentials */
	SP4(METADATA, 169, 254, 170, 23, 32),       /* AWS EKS Pod Identity agent */
	SP4(METADATA, 169, 254, 42, 42, 32),        /* Scaleway */
	SP4(METADATA, 169, 254, 0, 23, 32),         /* Tencent Cloud */
	SP4(METADATA, 100, 100, 100, 200, 32),      /* Alibaba Cloud (inside 100.64/10) */
	SP4(METADATA, 168, 63, 129, 16, 32),        /* Azure WireServer */
	SP4(METADATA, 192, 0, 0, 192, 32),          /* Oracle Cloud */

	/* IPv6: everything outside 2000::/3, fc00::/7, fe80::/10 and ff00::/8 is reserved
	 * (RFC 4291; with ::/96 IPv4-compatible, 100::/64 discard-only, 5f00::/16 SRv6 SIDs) */
	SP6(RESERVED, 3, 0x00),
	SP6(RESERVED, 2, 0x40),
	SP6(RESERVED, 2, 0x80),
	SP6(RESERVED, 3, 0xc0),
	SP6(RESERVED, 4, 0xe0),
	SP6(RESERVED, 5, 0xf0),
	SP6(RESERVED, 6, 0xf8),
	SP6(RESERVED, 9, 0xfe, 0x00),
	SP6(RESERVED, 10, 0xfe, 0xc0),              /* site-local, deprecated by RFC 3879 */
	SP6(RESERVED, 128, 0),                      /* ::, unspecified */
	SP6(LOOPBACK, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1),
	SP6(LINK_LOCAL, 10, 0xfe, 0x80),
	SP6(MULTICAST, 8, 0xff),
	SP6(TRANSLATION, 96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff), /* IPv4-mapped */
	SP6(TRANSLATION, 96, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff),       /* SIIT, RFC 2765 */
	SP6(TRANSLATION, 96, 0, 0x64, 0xff, 0x9b),                      /* NAT64, RFC 6052 */
	SP6(TRANSLATION, 48, 0, 0x64, 0xff, 0x9b, 0, 1),                /* local NAT64, RFC 8215 */
	SP6(TRANSLATION, 16, 0x20, 0x02),                               /* 6to4, RFC 3056 */
	SP6(PROTOCOL, 23, 0x20, 0x01),              /* IETF protocol assignments, RFC 2928: Teredo,
						     * PCP/TURN anycast, AMT, AS112, ORCHID, DRIP */
	SP6(DOCUMENTATION, 48, 0x20, 0x01, 0, 0x02),  /* benchmarking, RFC 5180 */
	SP6(DOCUMENTATION, 32, 0x20, 0x01, 0x0d, 0xb8), /* RFC 3849 */
	SP6(DOCUMENTATION, 20, 0x3f, 0xff),         /* RFC 9637 */
	SP6(PROTOCOL, 48, 0x26, 0x20, 0, 0x4f, 0x80, 0), /* AS112 direct delegation, RFC 7534 */
	/* cloud metadata */
	SP6(METADATA, 128, 0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54),
	/* AWS IMDS */
	SP6(METADATA, 128, 0xfd, 0, 0x0e, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x23),
	/* AWS EKS Pod Identity agent */
	SP6(METADATA, 128, 0xfd, 0x20, 0, 0xce, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x54),
	/* GCP */
};

#define N_SPECIALS (sizeof(specials) / sizeof(specials[0]))

static const char *const special_names[] = {
	"reserved",	 "loopback", "link-local",    "multicast",
	"metadata", "documentation", "protocol", "translation",
};

/* Per packet: IPv4 compares 32-bit words, IPv6 mostly stops at the first byte. */
static bool special_has(const struct special *e, const uint8_t addr[16])
{
	uint32_t a, n, m;
	if (e->family != AF_INET)
		return bits_equal(addr, e->addr, e->len);
	a = (uint32_t)addr[0] << 24 | (uint32_t)addr[1] << 16 | (uint32_t)addr[2] << 8 | addr[3];
	n = (uint32_t)e->addr[0] << 24 | (uint32_t)e->addr[1] << 16 | (uint32_t)e->addr[2] << 8 |
	    e->addr[3];
	m = e->len ? 0xffffffffu << (32 - e->len) : 0;
	return (a & m) == n;
}

unsigned conf_addr_special(int family, const uint8_t addr[16])
{
	unsigned best_len = 0, cat = 0;
	for (size_t i = 0; i < N_SPECIALS; i++)
		if (specials[i].family == family && specials[i].len >= best_len &&
		    special_has(&specials[i], addr)) {
			best_len = specials[i].len;
			cat = specials[i].cat;
		}
	return cat;
}

unsigned conf_sockaddr_special(const struct sockaddr *sa)
{
	int fam;
	uint8_t a[16];
	unsigned cats = 0;
	if (conf_addr_canon(sa, &fam, a) != 0)
		return CONF_SPECIAL_RESERVED;
	if (sa->sa_family == AF_INET6 && fam == AF_INET) /* a disguise: both forms count */
		cats = conf_addr_special(AF_INET6,
					 ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
	return cats | conf_addr_special(fam, a);
}

bool conf_addr_is_special(int family, const uint8_t addr[16])
{
	return conf_addr_special(family, addr) != 0;
}

unsigned conf_prefix_special(const struct conf_prefix *p)
{
	unsigned cats = 0;
	for (size_t i = 0; i < N_SPECIALS; i++)
		if (specials[i].family == p->family && p->len >= specials[i].len &&
		    bits_equal(p->addr, specials[i].addr, specials[i].len))
			cats |= specials[i].cat;
	return cats;
}

bool conf_prefix_is_special(const struct conf_prefix *p)
{
	return conf_prefix_special(p) != 0;
}

const char *conf_special_name(unsigned cat)
{
	for (unsigned i = 0; i < CONF_SPECIAL_COUNT; i++)
		if (cat == 1u << i)
			return special_names[i];
	return NULL;
}

int conf_special_parse(const char *name, unsigned *cat)
{
	for (unsigned i = 0; i < CONF_SPECIAL_COUNT; i++)
		if (strcasecmp(name, special_names[i]) == 0) {
			*cat = 1u << i;
			return 0;
		}
	return -ENOENT;
}

size_t conf_special_count(void)
{
	return N_SPECIALS;
}

int conf_special_get(size_t i, struct conf_prefix *p, unsigned *cat)
{
	if (i >= N_SPECIALS)
		return -ENOENT;
	memset(p, 0, sizeof(*p));
	p->family = specials[i].family;
	p->len = specials[i].len;
	memcpy(p->addr, specials[i].addr, 16);
	*cat = specials[i].cat;
	return 0;
}

int conf_endpoint_covers(const char *text, const struct sockaddr *peer)
{
	struct conf_endpoint ep;
	char err[160] = "";
	uint8_t a[16];
	int fam;

	memset(&ep, 0, sizeof(ep));
	if (conf_parse_endpoint(text, &ep, err, sizeof(err)) == -EINVAL ||
	    conf_addr_canon(peer, &fam, a) < 0)
		return -EINVAL;
	return fam == ep.prefix.family && bits_equal(a, ep.prefix.addr, ep.prefix.len) ? 1 : 0;
}
