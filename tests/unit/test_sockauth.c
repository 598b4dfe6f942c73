// SPDX-License-Identifier: MIT
/* sockauth: --allow-uid/--allow-gid lists and a client's credentials. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "sockauth.h"

static void test_sockauth_find(void **state)
{
	uid_t uid = 1;
	gid_t gid = 1;

	assert_int_equal(sockauth_user_find("root", &uid), 0);
	assert_int_equal(uid, 0);
	assert_int_equal(sockauth_group_find("root", &gid), 0);
	assert_int_equal(gid, 0);
	/* Numbers need not name anyone. */
	assert_int_equal(sockauth_user_find("4242", &uid), 0);
	assert_int_equal(uid, 4242);
	assert_int_equal(sockauth_group_find("65534", &gid), 0);
	assert_int_equal(gid, 65534);
	assert_int_equal(sockauth_user_find("", &uid), -EINVAL);
	assert_int_equal(sockauth_user_find("4294967295", &uid), -EINVAL);
	assert_int_equal(sockauth_group_find("99999999999", &gid), -EINVAL);
	assert_int_equal(sockauth_user_find("no-such-user-fp", &uid), -ENOENT);
	assert_int_equal(sockauth_group_find("no-such-group-fp", &gid),
			 -ENOENT);
	assert_int_equal(sockauth_user_find("-1", &uid), -ENOENT);
}

static void test_sockauth_lists(void **state)
{
	struct sockauth sa = { 0 };

	assert_int_equal(sockauth_uid_allow(&sa, 7), 0);
	assert_int_equal(sockauth_uid_allow(&sa, 7), 0);
	assert_int_equal(sa.n_uids, 1);
	assert_true(sockauth_uid_is_allowed(&sa, 7));
	assert_false(sockauth_uid_is_allowed(&sa, 8));
	assert_false(sockauth_gid_is_allowed(&sa, 7));
	for (gid_t g = 0; g < SOCKAUTH_IDS_MAX; g++)
		assert_int_equal(sockauth_gid_allow(&sa, g + 100), 0);
	assert_int_equal(sockauth_gid_allow(&sa, 100), 0);
	assert_int_equal(sockauth_gid_allow(&sa, 1), -E2BIG);
	assert_true(sockauth_gid_is_allowed(&sa, 100 + SOCKAUTH_IDS_MAX - 1));
}

static void test_sockauth_status(void **state)
{
	static const char head[] = "Name:\tcat\nUmask:\t0022\nState:\tR\n"
				   "Uid:\t1000\t1000\t1000\t1000\n"
				   "Gid:\t1000\t1000\t1000\t1000\n";
	struct sockauth sa = { 0 };
	char buf[512];

	sockauth_gid_allow(&sa, 27);
	snprintf(buf, sizeof(buf), "%sGroups:\t4 24 27 100 \nNStgid:\t5\n",
		 head);
	assert_true(sockauth_status_is_member(&sa, buf, 1000));
	/* Another effective uid: another process, or one that changed. */
	assert_false(sockauth_status_is_member(&sa, buf, 1001));
	snprintf(buf, sizeof(buf), "%sGroups:\t4 24 270 100 \n", head);
	assert_false(sockauth_status_is_member(&sa, buf, 1000));
	/* No groups: the next line's numbers are not taken for them. */
	snprintf(buf, sizeof(buf), "%sGroups:\t\nNStgid:\t27\n", head);
	assert_false(sockauth_status_is_member(&sa, buf, 1000));
	snprintf(buf, sizeof(buf), "%sGroups:\n27\n", head);
	assert_false(sockauth_status_is_member(&sa, buf, 1000));
	/* A read cut short: "27" may be the start of 270. */
	snprintf(buf, sizeof(buf), "%sGroups:\t4 27", head);
	assert_false(sockauth_status_is_member(&sa, buf, 1000));
	/* "Groups" must be the whole key, at the start of a line. */
	snprintf(buf, sizeof(buf), "%sXGroups:\t27\nGroupsX:\t27\n", head);
	assert_false(sockauth_status_is_member(&sa, buf, 1000));
	assert_false(sockauth_status_is_member(&sa, "Groups:\t27\n", 1000));
	assert_false(sockauth_status_is_member(&sa, "", 1000));
	snprintf(buf, sizeof(buf), "%sGroups:\t99999999999 27\n", head);
	assert_false(sockauth_status_is_member(&sa, buf, 1000));
}

/* A socketpair's peer is this process, with its credentials. */
static void test_sockauth_peer(void **state)
{
	struct sockauth sa = { 0 };
	uid_t other_uid = geteuid() + 1;
	gid_t groups[64], other_gid = 4000000000u;
	struct ucred cr;
	int sv[2], n;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	/* Nobody listed: refused, credentials still told. */
	assert_int_equal(sockauth_peer_check(&sa, sv[0], &cr), 0);
	assert_int_equal(cr.uid, geteuid());
	assert_int_equal(cr.gid, getegid());
	assert_int_equal(cr.pid, getpid());
	sockauth_uid_allow(&sa, other_uid);
	sockauth_gid_allow(&sa, other_gid);
	assert_int_equal(sockauth_peer_check(&sa, sv[0], &cr), 0);
	sockauth_uid_allow(&sa, geteuid());
	assert_int_equal(sockauth_peer_check(&sa, sv[0], &cr), 1);

	memset(&sa, 0, sizeof(sa));
	sockauth_gid_allow(&sa, getegid());
	assert_int_equal(sockauth_peer_check(&sa, sv[0], &cr), 1);

	n = getgroups(64, groups);
	for (int i = 0; i < n; i++) {
		if (groups[i] == getegid())
			continue;
		memset(&sa, 0, sizeof(sa));
		sockauth_gid_allow(&sa, groups[i]);
		assert_int_equal(sockauth_peer_check(&sa, sv[0], &cr), 1);
	}
	close(sv[0]);
	close(sv[1]);

	/* Not a socket: its credentials cannot be read. */
	assert_int_equal(pipe(sv), 0);
	assert_int_equal(sockauth_peer_check(&sa, sv[0], &cr), -ENOTSOCK);
	assert_int_equal(cr.uid, (uid_t)-1);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sockauth_find),
		cmocka_unit_test(test_sockauth_lists),
		cmocka_unit_test(test_sockauth_status),
		cmocka_unit_test(test_sockauth_peer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
