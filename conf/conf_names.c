/* The configuration's enum values by name, as the YAML and the logs spell them. */
#include "conf/conf_internal.h"

const char *conf_auth_type_name(enum conf_auth_type t)
{
	switch (t) {
	case CONF_AUTH_NONE:
		return "none";
	case CONF_AUTH_STATIC:
		return "static";
	case CONF_AUTH_EPHEMERAL:
		return "ephemeral";
	}
	return "?";
}

const char *conf_proto_name(enum conf_proto p)
{
	static const char *const n[] = { "TURN-UDP", "TURN-TCP", "TURN-TLS", "TURN-DTLS" };
	return (unsigned)p < 4 ? n[p] : "?";
}

const char *conf_cluster_type_name(enum conf_cluster_type t)
{
	return t == CONF_CLUSTER_STATIC       ? "STATIC"
	       : t == CONF_CLUSTER_STRICT_DNS ? "STRICT_DNS"
					      : "?";
}

const char *conf_cluster_proto_name(enum conf_cluster_proto p)
{
	return p == CONF_CPROTO_UDP ? "UDP" : p == CONF_CPROTO_TCP ? "TCP" : "?";
}
