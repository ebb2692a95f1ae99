package main

/*
#include <stdlib.h>
*/
import "C"

import (
	"unsafe"

	"github.com/tirastore/tirastore/core/environ"
)

// cLookupEnv reads the live C environment, so variables the host program
// sets after loading the library (os.environ[...] = ... in Python) are seen,
// as the original library saw them. getenv is not synchronized with a
// concurrent setenv in the host; the original had the same exposure.
func cLookupEnv(name string) (string, bool) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	v := C.getenv(cname)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}

func init() { environ.Lookup = cLookupEnv }
