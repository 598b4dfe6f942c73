// SPDX-License-Identifier: MIT
/* placeholder */
#include "uffd.h"
