#!/bin/bash
# The Ansible playbook (deploy/ansible/):
#   - ansible-playbook --syntax-check passes with the example inventory
#   - its /etc/default/farpage template, rendered for an agent's host with
#     the settings of group_vars/all.yml, is deploy/farpage.env.example's
#     variables with the same values (the coordinator's address and pool
#     size given as the example's), nothing more, nothing less
#   - with farpage_coord_etcd set it says FARPAGE_COORD_STORE=etcd://...
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
A=$SRC/deploy/ansible
command -v ansible-playbook >/dev/null || fp_skip "no ansible-playbook (Debian: ansible-core)"
export ANSIBLE_CONFIG=$FP_TMP/ansible.cfg ANSIBLE_LOCAL_TEMP=$FP_TMP/ansible-local \
	ANSIBLE_REMOTE_TEMP=$FP_TMP/ansible-remote ANSIBLE_NOCOLOR=1 \
	ANSIBLE_LOCALHOST_WARNING=False ANSIBLE_RETRY_FILES_ENABLED=False
: >"$ANSIBLE_CONFIG"

ansible-playbook --syntax-check -i "$A/inventory.example.ini" "$A/farpage.yml" \
	>"$FP_TMP/syntax.log" 2>&1 || { cat "$FP_TMP/syntax.log" >&2; fp_fail "ansible-playbook --syntax-check"; }
fp_log "ok: ansible-playbook --syntax-check farpage.yml"

ex() { grep -v '^#' "$1" | grep '=' | sed 's/="\(.*\)"$/=\1/' | sort; }
ansible -i "$A/inventory.example.ini" hosta.example -c local \
	-e farpage_coordinator=127.0.0.1:7700 -e farpage_node_pool_size=1G \
	-m ansible.builtin.template \
	-a "src=$A/templates/farpage.env.j2 dest=$FP_TMP/farpage.env" \
	>"$FP_TMP/template.log" 2>&1 || { cat "$FP_TMP/template.log" >&2; fp_fail "the template does not render"; }
diff <(ex "$SRC/deploy/farpage.env.example") <(ex "$FP_TMP/farpage.env") >"$FP_TMP/diff" ||
	{ cat "$FP_TMP/diff" >&2; fp_fail "the rendered /etc/default/farpage differs from farpage.env.example (< example, > rendered)"; }
fp_log "ok: the template renders farpage.env.example's $(ex "$FP_TMP/farpage.env" | wc -l) variables and values"

# With farpage_coord_etcd set, the coordinator keeps its tables in etcd.
ansible -i "$A/inventory.example.ini" coord1.example -c local \
	-e farpage_coord_etcd=10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 \
	-m ansible.builtin.template \
	-a "src=$A/templates/farpage.env.j2 dest=$FP_TMP/farpage-etcd.env" \
	>"$FP_TMP/template-etcd.log" 2>&1 || { cat "$FP_TMP/template-etcd.log" >&2; fp_fail "the template does not render with farpage_coord_etcd"; }
grep -qx 'FARPAGE_COORD_STORE=etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379' "$FP_TMP/farpage-etcd.env" ||
	fp_fail "farpage_coord_etcd: no FARPAGE_COORD_STORE=etcd://... ($(grep COORD_STORE "$FP_TMP/farpage-etcd.env"))"
fp_log "ok: farpage_coord_etcd renders FARPAGE_COORD_STORE=etcd://..."
fp_log "PASS"
