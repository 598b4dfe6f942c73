// SPDX-License-Identifier: MIT
/* placeholder */
#include "farpage.h"
