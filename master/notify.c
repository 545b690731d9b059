/* Master: systemd readiness, reload, stop and watchdog notifications (no-op without libsystemd). */
#include "config.h"

#include "master/master.h"

#include <stdio.h>
#include <time.h>

#include "common/mono.h"

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

/* sd_notify() does nothing when NOTIFY_SOCKET is unset, so these are safe everywhere. */
void notify_ready(void)
{
	sd_notify(0, "READY=1");
}

/* Type=notify-reload wants the monotonic time of the reload start alongside RELOADING=1. */
void notify_reloading(void)
{
	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long)(mono_ns() / 1000u));
}

void notify_stopping(void)
{
	sd_notify(0, "STOPPING=1");
}

void notify_mainpid(pid_t pid)
{
	sd_notifyf(0, "MAINPID=%d\nREADY=1", (int)pid);
}

void notify_status(const char *text)
{
	sd_notifyf(0, "STATUS=%s", text);
}

uint64_t notify_watchdog_usec(void)
{
	uint64_t usec = 0;

	if (sd_watchdog_enabled(0, &usec) <= 0)
		return 0;
	return usec;
}

void notify_watchdog(void)
{
	sd_notify(0, "WATCHDOG=1");
}
#else
void notify_ready(void)
{
}

void notify_reloading(void)
{
}

void notify_stopping(void)
{
}

void notify_mainpid(pid_t pid)
{
	(void)pid;
}

void notify_status(const char *text)
{
	(void)text;
}

uint64_t notify_watchdog_usec(void)
{
	return 0;
}

void notify_watchdog(void)
{
}
#endif
