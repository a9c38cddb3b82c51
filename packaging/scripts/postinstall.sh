#!/bin/sh
# /etc/llmflow readable by the service alone; the state directory; systemd
# told about the unit. The service is not started: it needs its secrets.
set -e
chown root:llmflow /etc/llmflow /etc/llmflow/gateway.hcl
chmod 0750 /etc/llmflow
chmod 0640 /etc/llmflow/gateway.hcl
install -d -o llmflow -g llmflow -m 0700 /var/lib/llmflow
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
cat <<'MSG'
llmflow is installed (/usr/bin/llmflow, unit llmflow.service, user llmflow).
Next: put the secrets in /etc/llmflow (mode 0600, owner llmflow), edit
/etc/llmflow/gateway.hcl, then:
  sudo -u llmflow llmflow doctor -c /etc/llmflow/gateway.hcl
  systemctl enable --now llmflow
MSG
