#!/bin/sh
# The user, /etc/llmflow and /var/lib/llmflow (the store and its spool)
# stay: removing the package never removes accounting data.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
