#!/bin/bash
# /metrics behind a bearer token (loopback): the coordinator and an agent
# with --metrics-token-file answer a scrape without the token, with a
# wrong one or another scheme 401 (WWW-Authenticate: Bearer), with the
# token 200 and their samples; a token file holding too short a token, or
# a space, or none at all stops the daemon with the reason; without the
# option /metrics stays open (the other tests scrape it so).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
command -v curl >/dev/null || fp_skip "curl is not installed"
fp_hosts_loopback H
TOKEN=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$FP_TMP/token"
chmod 600 "$FP_TMP/token"
fp_coord_start H --metrics-listen 127.0.0.1:0 --metrics-token-file "$FP_TMP/token"
fp_node_start H A --metrics-listen 127.0.0.1:0 --metrics-token-file "$FP_TMP/token"
fp_node_start H B --metrics-listen 127.0.0.1:0

# scrape WHO AUTH: the HTTP status of one GET /metrics (AUTH: a header or
# ""); the body in $FP_TMP/body, the headers in $FP_TMP/hdr.
scrape() {
	local m
	m=$(sed -n 's/^metrics //p' "$FP_TMP/$1.addr")
	[ -n "$m" ] || fp_fail "$1 serves no /metrics"
	curl -s -o "$FP_TMP/body" -D "$FP_TMP/hdr" -w '%{http_code}' \
		${2:+-H "$2"} "http://$m/metrics"
}
for who in coord A; do
	for auth in "" "Authorization: Bearer ${TOKEN}x" "Authorization: Bearer ${TOKEN:1}" \
		"Authorization: Basic $TOKEN" "Authorization: Bearer"; do
		code=$(scrape "$who" "$auth")
		[ "$code" = 401 ] || fp_fail "$who: '${auth:-no header}' got $code, not 401"
		grep -qi '^WWW-Authenticate: Bearer' "$FP_TMP/hdr" || fp_fail "$who: 401 without WWW-Authenticate"
		grep -q 'farpage_build_info' "$FP_TMP/body" && fp_fail "$who: a 401 carried samples"
	done
	code=$(scrape "$who" "Authorization: Bearer $TOKEN")
	[ "$code" = 200 ] && grep -q '^farpage_build_info{' "$FP_TMP/body" ||
		fp_fail "$who: the token got $code: $(head -c 200 "$FP_TMP/body")"
	fp_log "ok: $who's /metrics: 401 without the token (or a wrong one), 200 with it"
done
code=$(scrape B "")
[ "$code" = 200 ] && grep -q '^farpage_build_info{' "$FP_TMP/body" || fp_fail "B without a token file: $code"
fp_log "ok: B without --metrics-token-file: /metrics open"

# Bad token files: the agent does not start, and says why.
bad() {
	if [ "$1" = none ]; then rm -f "$FP_TMP/bad.token"; else printf '%b' "$1" >"$FP_TMP/bad.token"; fi
	fp_node_refused H X "$FP_TMP/x.log" "$2" --data-listen "127.0.0.1:$(fp_port H)" \
		--metrics-listen 127.0.0.1:0 --metrics-token-file "$FP_TMP/bad.token"
	local rc=$FP_REFUSED_RC
	grep -q -- "--metrics-token-file .*$3" "$FP_TMP/x.log" ||
		{ cat "$FP_TMP/x.log" >&2; fp_fail "$2: exit $rc, not the reason '$3'"; }
	fp_log "ok: $2: exit $rc, $(grep -o -- "--metrics-token-file .*$3.*" "$FP_TMP/x.log" | head -n1 | cut -c1-120)"
}
bad 'short\n' "a short token" "a token of 5 characters"
bad '' "an empty file" "a token of 0 characters"
bad "${TOKEN:0:10} ${TOKEN:10}\n" "a token with a space" "holds a space"
bad none "no file" "No such file"
exit 0
