#!/bin/sh
# Stop the service before its binary goes (removal, not an upgrade).
set -e
case "$1" in
remove|0)
	if [ -d /run/systemd/system ]; then
		systemctl stop llmflow.service >/dev/null 2>&1 || true
		systemctl disable llmflow.service >/dev/null 2>&1 || true
	fi
	;;
esac
