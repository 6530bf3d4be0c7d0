package s3gw

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/versity/versitygw/s3err"

	"github.com/braidfs/braid"
)

const (
	maxKeyBytes  = 1024 // S3's limit on a key
	maxNameBytes = 255  // braid's limit on one path component
	// reservedDir holds a bucket's temporary files and multipart uploads.
	reservedDir = ".braid-s3"
)

func invalidArgument(format string, args ...any) s3err.APIError {
	return s3err.APIError{Code: "InvalidArgument", Description: fmt.Sprintf(format, args...), HTTPStatusCode: http.StatusBadRequest}
}

// objectPath maps bucket and key to a braid path, or refuses a key that
// is not a path. dirMarker reports a key ending in "/".
func objectPath(bucket, key string) (p string, dirMarker bool, err error) {
	if key == "" {
		return "", false, invalidArgument("empty key")
	}
	if len(key) > maxKeyBytes {
		return "", false, s3err.GetAPIError(s3err.ErrKeyTooLong)
	}
	if strings.IndexByte(key, 0) >= 0 {
		return "", false, invalidArgument("key %q contains a NUL byte", key)
	}
	dirMarker = strings.HasSuffix(key, "/")
	parts := strings.Split(strings.TrimSuffix(key, "/"), "/")
	for i, part := range parts {
		switch {
		case part == "":
			return "", false, invalidArgument("key %q has an empty path component: braid stores keys as paths", key)
		case !keyName(part):
			return "", false, invalidArgument("key %q has a %q path component: braid stores keys as paths", key, part)
		case len(part) > maxNameBytes:
			return "", false, invalidArgument("key %q has a path component over %d bytes", key, maxNameBytes)
		case i == 0 && part == reservedDir:
			return "", false, invalidArgument("keys under %s/ are reserved", reservedDir)
		}
	}
	return "/" + bucket + "/" + strings.TrimSuffix(key, "/"), dirMarker, nil
}

// keyName says whether a path component can be part of a key: "." and
// ".." name directories by their place, not by a key.
func keyName(part string) bool { return part != "." && part != ".." }

// hasCode reports whether err is an S3 error with this code.
func hasCode(err error, code string) bool {
	var apiErr s3err.S3Error
	return errors.As(err, &apiErr) && apiErr.BaseError().Code == code
}

// s3Error translates a braid error into the S3 error a client expects;
// kind says what was missing when err is not-found.
func s3Error(err error, notFound s3err.ErrorCode) error {
	var apiErr s3err.S3Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &apiErr):
		return apiErr
	case errors.Is(err, braid.ErrNotFound):
		return s3err.GetAPIError(notFound)
	case errors.Is(err, braid.ErrNotDir):
		return s3err.GetAPIError(s3err.ErrObjectParentIsFile)
	case errors.Is(err, braid.ErrIsDir):
		return s3err.GetAPIError(s3err.ErrExistingObjectIsDirectory)
	case errors.Is(err, braid.ErrNameTooLong):
		return s3err.GetAPIError(s3err.ErrKeyTooLong)
	case errors.Is(err, braid.ErrNoSpace):
		return s3err.APIError{Code: "InsufficientStorage", Description: err.Error(), HTTPStatusCode: http.StatusInsufficientStorage}
	case errors.Is(err, braid.ErrUnavailable):
		return s3err.APIError{Code: "ServiceUnavailable", Description: err.Error(), HTTPStatusCode: http.StatusServiceUnavailable}
	case errors.Is(err, braid.ErrBusy):
		return s3err.GetAPIError(s3err.ErrSlowDown)
	}
	return s3err.APIError{Code: "InternalError", Description: err.Error(), HTTPStatusCode: http.StatusInternalServerError}
}
