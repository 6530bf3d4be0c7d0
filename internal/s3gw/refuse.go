package s3gw

import (
	"bytes"
	"net/http"

	"github.com/valyala/fasthttp"
	"github.com/versity/versitygw/s3err"
)

// Server-side encryption (SSE-S3, SSE-KMS, SSE-C) is not implemented by
// the gateway: braid encrypts on the client, with a layout's
// enc=aes-gcm. versitygw hands such requests to the backend with their
// encryption fields, which a backend that ignores them acknowledges: a
// PUT "encrypted" with a customer's key was stored in the clear, and a
// GET without the key returned it. So every request that names
// server-side encryption, in a header or a presigned URL's query, is
// refused with NotImplemented before anything is read or stored.

// sseNames start the names of the headers (and query parameters) that
// ask for server-side encryption.
var sseNames = [][]byte{
	[]byte("x-amz-server-side-encryption"),
	[]byte("x-amz-copy-source-server-side-encryption"),
}

// refuseSSE wraps next, answering NotImplemented to a request that asks
// for server-side encryption.
func refuseSSE(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if asksSSE(ctx) {
			writeNotImplemented(ctx, "server-side encryption is not implemented by this gateway: braid encrypts on the client, with a layout's enc=aes-gcm")
			return
		}
		next(ctx)
	}
}

func asksSSE(ctx *fasthttp.RequestCtx) bool {
	for k := range ctx.Request.Header.All() {
		if hasSSEName(k) {
			return true
		}
	}
	for k := range ctx.QueryArgs().All() {
		if hasSSEName(k) {
			return true
		}
	}
	return false
}

func hasSSEName(name []byte) bool {
	for _, p := range sseNames {
		if len(name) >= len(p) && bytes.EqualFold(name[:len(p)], p) {
			return true
		}
	}
	return false
}

func writeNotImplemented(ctx *fasthttp.RequestCtx, why string) {
	e := s3err.GetAPIError(s3err.ErrNotImplemented)
	e.Description = why
	ctx.SetStatusCode(http.StatusNotImplemented)
	ctx.SetContentType("application/xml")
	ctx.SetBody(e.XMLBody("", ""))
}
