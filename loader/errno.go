package loader

import "golang.org/x/sys/unix"

var errE2BIG error = unix.E2BIG
