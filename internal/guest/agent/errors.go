package agent

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/pandastack/pandastack/internal/guest"
)

func gerr(code, msg string) *guest.Error { return &guest.Error{Code: code, Message: msg} }

// toGuestError maps any error to a wire error, by errno where there is one.
func toGuestError(err error) *guest.Error {
	var ge *guest.Error
	if errors.As(err, &ge) {
		return ge
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return gerr(errnoCode(errno), err.Error())
	}
	return gerr(guest.CodeInternal, err.Error())
}

func errnoCode(e syscall.Errno) string {
	switch e {
	case syscall.ENOENT:
		return guest.CodeNotFound
	case syscall.EACCES, syscall.EPERM, syscall.EROFS, syscall.ETXTBSY:
		return guest.CodePermissionDenied
	case syscall.EEXIST:
		return guest.CodeAlreadyExists
	case syscall.ENOTDIR:
		return guest.CodeNotADirectory
	case syscall.EISDIR:
		return guest.CodeIsADirectory
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
		return guest.CodeNoSpace
	case syscall.ENOTEMPTY:
		return guest.CodeNotEmpty
	case syscall.EINVAL, syscall.ENAMETOOLONG, syscall.ELOOP, syscall.EXDEV, syscall.EBADF:
		return guest.CodeInvalidArgument
	}
	return guest.CodeInternal
}

// cleanPath validates a request path: absolute, no NUL, at most 4096 bytes.
func cleanPath(field, p string) (string, error) {
	switch {
	case p == "":
		return "", gerr(guest.CodeInvalidArgument, field+" is required")
	case len(p) > guest.MaxPath:
		return "", gerr(guest.CodeInvalidArgument, field+" is longer than 4096 bytes")
	case strings.IndexByte(p, 0) >= 0:
		return "", gerr(guest.CodeInvalidArgument, field+" contains a NUL byte")
	case !strings.HasPrefix(p, "/"):
		return "", gerr(guest.CodeInvalidArgument, field+" must be absolute")
	}
	return filepath.Clean(p), nil
}
