package fasthttpcore

import (
	"bytes"
	"io"
	"maps"
	"mime/multipart"
	"slices"

	"github.com/valyala/fasthttp"
)

// formBody is the body of a multipart/form-data request as Begin sees it.
// Unless Fiber's DisablePreParseMultipartForm is set, fasthttp parses such a
// form while reading the request and keeps no raw bytes; its Request.Body
// renders the form again in map order, which would give every retry another
// fingerprint. Here fields and files are rendered in name order with the
// request's boundary, so the same form always yields the same bytes.
func formBody(r *fasthttp.Request, boundary string) []byte {
	form, err := r.MultipartForm() // already parsed, or parsed now and kept for the handler
	if err != nil {
		return r.Body()
	}
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	if w.SetBoundary(boundary) != nil {
		return r.Body()
	}
	for _, name := range slices.Sorted(maps.Keys(form.Value)) {
		for _, v := range form.Value[name] {
			_ = w.WriteField(name, v)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(form.File)) {
		for _, fh := range form.File[name] {
			if err := writeFile(w, fh); err != nil {
				return r.Body()
			}
		}
	}
	_ = w.Close()
	return buf.Bytes()
}

func writeFile(w *multipart.Writer, fh *multipart.FileHeader) error {
	part, err := w.CreatePart(fh.Header)
	if err != nil {
		return err
	}
	f, err := fh.Open()
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(part, f)
	return err
}
