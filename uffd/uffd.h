/* SPDX-License-Identifier: MIT */
#ifndef UFFD_UFFD_H
#define UFFD_UFFD_H
#endif
