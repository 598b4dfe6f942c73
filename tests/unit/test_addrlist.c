// SPDX-License-Identifier: MIT
/* addrlist: "A,B,C" address lists (good lists, empty entries, no port, too
 * many) and the order round the list. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "addrlist.h"

static void test_addrlist_good(void **state)
{
	struct addrlist l;
	char why[300];

	assert_int_equal(
		addrlist_parse("127.0.0.1:7700", "7700", &l, why, sizeof(why)),
		0);
	assert_int_equal(l.n, 1);
	assert_string_equal(l.addr[0], "127.0.0.1:7700");
	assert_string_equal(why, "");

	assert_int_equal(addrlist_parse("10.0.0.1:7000,[::1]:7001,"
					"coord-3.example:7002",
					"7700", &l, why, sizeof(why)),
			 0);
	assert_int_equal(l.n, 3);
	assert_string_equal(l.addr[0], "10.0.0.1:7000");
	assert_string_equal(l.addr[1], "[::1]:7001");
	assert_string_equal(l.addr[2], "coord-3.example:7002");

	/* blanks around an entry are not part of it */
	assert_int_equal(
		addrlist_parse(" a:1 ,\tb:2", "7700", &l, why, sizeof(why)), 0);
	assert_int_equal(l.n, 2);
	assert_string_equal(l.addr[0], "a:1");
	assert_string_equal(l.addr[1], "b:2");

	/* exactly the maximum */
	assert_int_equal(addrlist_parse("h:1,h:2,h:3,h:4,h:5,h:6,h:7,h:8",
					"7700", &l, why, sizeof(why)),
			 0);
	assert_int_equal(l.n, ADDRLIST_MAX);
	assert_string_equal(l.addr[7], "h:8");
}

static void test_addrlist_empty(void **state)
{
	static const char *const bad[] = {
		"", " ", ",", "a:1,", ",a:1", "a:1,,b:2", "a:1, ,b:2",
	};
	struct addrlist l;
	char why[300];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		assert_int_equal(
			addrlist_parse(bad[i], "7700", &l, why, sizeof(why)),
			-EINVAL);
		assert_true(strstr(why, "empty") || strstr(why, "no address"));
	}
	addrlist_parse("a:1,,b:2", "7700", &l, why, sizeof(why));
	assert_string_equal(why, "'a:1,,b:2': address 2 is empty");
	addrlist_parse("", "7700", &l, why, sizeof(why));
	assert_string_equal(why,
			    "no address: give HOST:PORT, e.g. 127.0.0.1:7700");
}

static void test_addrlist_no_port(void **state)
{
	struct addrlist l;
	char why[300];

	/* one address: the message the single-address check always gave */
	assert_int_equal(addrlist_parse("coord", "7700", &l, why, sizeof(why)),
			 -EINVAL);
	assert_string_equal(why, "'coord' has no port: give HOST:PORT, e.g. "
				 "coord:7700");
	assert_int_equal(addrlist_parse("a:1,b", "7701", &l, why, sizeof(why)),
			 -EINVAL);
	assert_string_equal(why,
			    "'b' has no port: give HOST:PORT, e.g. b:7701");
	assert_int_equal(
		addrlist_parse("a:1,::1:80", "7700", &l, why, sizeof(why)),
		-EINVAL);
	assert_string_equal(why,
			    "'::1:80' is not HOST:PORT (an IPv6 address goes "
			    "in brackets: [::1]:7700)");
	assert_int_equal(addrlist_parse("a:http", "7700", &l, why, sizeof(why)),
			 -EINVAL);
	assert_int_equal(
		addrlist_parse("a:65536,b:1", "7700", &l, why, sizeof(why)),
		-EINVAL);
	assert_int_equal(addrlist_parse("a:1,b:", "7700", &l, why, sizeof(why)),
			 -EINVAL);
}

static void test_addrlist_too_many(void **state)
{
	char s[200], why[300], big[400];
	struct addrlist l;

	snprintf(s, sizeof(s), "h:1,h:2,h:3,h:4,h:5,h:6,h:7,h:8,h:9");
	assert_int_equal(addrlist_parse(s, "7700", &l, why, sizeof(why)),
			 -EINVAL);
	assert_string_equal(why, "'h:1,h:2,h:3,h:4,h:5,h:6,h:7,h:8,h:9': "
				 "more than 8 addresses");
	/* an entry longer than any address */
	memset(big, 'a', sizeof(big));
	memcpy(big + sizeof(big) - 6, ":7700", 6);
	assert_int_equal(addrlist_parse(big, "7700", &l, why, sizeof(why)),
			 -EINVAL);
	assert_string_equal(why, "address 1 is too long");
}

static void test_addrlist_next(void **state)
{
	struct addrlist l;
	char why[300];

	assert_int_equal(addrlist_parse("a:1", "7700", &l, why, sizeof(why)),
			 0);
	assert_int_equal(addrlist_next(&l, 0), 0);
	assert_int_equal(
		addrlist_parse("a:1,b:2,c:3", "7700", &l, why, sizeof(why)), 0);
	assert_int_equal(addrlist_next(&l, 0), 1);
	assert_int_equal(addrlist_next(&l, 1), 2);
	assert_int_equal(addrlist_next(&l, 2), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_addrlist_good),
		cmocka_unit_test(test_addrlist_empty),
		cmocka_unit_test(test_addrlist_no_port),
		cmocka_unit_test(test_addrlist_too_many),
		cmocka_unit_test(test_addrlist_next),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
