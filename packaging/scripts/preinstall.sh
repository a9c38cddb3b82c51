#!/bin/sh
# The llmflow system user and group, before the files that belong to them.
set -e
if ! getent group llmflow >/dev/null; then
	groupadd --system llmflow
fi
if ! getent passwd llmflow >/dev/null; then
	useradd --system --gid llmflow --home-dir /var/lib/llmflow --no-create-home \
		--shell /usr/sbin/nologin --comment "llmflow gateway" llmflow
fi
