#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# routes.sh over IPv6: see there.
ROUTES_FAMILY=6 exec "$(dirname "$0")/routes.sh"
