package idemsim

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// payload is what a logical request means to send: its method, path and
// body, as a document. Each sending renders it anew, as a client library
// may: JSON members in another order (members whose names fold together
// keep theirs), other whitespace and escapes, another JSON media type; a
// form with a new boundary, preamble and epilogue. The policy counts all
// of these as one request. A client that errs sends a variant instead
// (another path, method, value, number spelling, order of members that
// fold together, media type or encoding), which is another request.
type payload struct {
	method   string
	path     string
	kind     bodyKind
	encoding string   // "gzip": body is sent compressed, as raw
	doc      jvalue   // kindJSON
	parts    []part   // kindForm
	raw      []byte   // kindRaw, and the compressed body
	rawType  string   // kindRaw's media type ("" for none)
	jsonType []string // the JSON media types its sendings choose from
}

// part is one part of a form: its header lines, in order, and content.
type part struct {
	header  []string
	content string
}

var paths = [...]string{"/orders", "/orders?express=1", "/refunds"}

// foldNames are groups of member names that encoding/json takes for one
// name: ASCII case, the long s (ſ, U+017F) and the Kelvin sign (U+212A).
var foldNames = [][]string{
	{"amount", "Amount", "AMOUNT"},
	{"sku", "SKU", "\u017fku"},
	{"kind", "Kind", "\u212aind"},
}

// newPayload draws logical request i's payload.
func newPayload(r *rand.Rand, i int) *payload {
	p := &payload{method: "POST", path: paths[r.IntN(len(paths))]}
	if r.Float64() < 0.15 {
		p.method = "PATCH"
	}
	amount := 100 + r.IntN(10000)
	switch x := r.Float64(); {
	case x < 0.7:
		p.kind = kindJSON
		p.doc = newDoc(r, i, amount)
		p.jsonType = [][]string{
			{"application/json"},
			{"application/json", "application/json; charset=utf-8", "Application/JSON"},
			{"application/merge-patch+json", "application/vnd.sim+json; v=2"},
		}[r.IntN(3)]
		if r.Float64() < 0.15 {
			p.encoding = "gzip"
			p.raw = gzipped(renderJSON(r, p.doc, false), gzip.DefaultCompression)
		}
	case x < 0.85:
		p.kind = kindForm
		p.parts = []part{
			{[]string{`Content-Disposition: form-data; name="request"`}, strconv.Itoa(i)},
			{[]string{`Content-Disposition: form-data; name="amount"`}, strconv.Itoa(amount)},
		}
		if r.Float64() < 0.6 {
			p.parts = append(p.parts, part{
				[]string{fmt.Sprintf(`Content-Disposition: form-data; name="receipt"; filename="r%d.txt"`, i), "Content-Type: text/plain"},
				fmt.Sprintf("receipt %d\r\nline two\nthird, with \xff raw bytes", i),
			})
		}
	default:
		p.kind = kindRaw
		p.raw = fmt.Appendf(nil, "request=%d&amount=%d", i, amount)
		p.rawType = [...]string{"application/x-www-form-urlencoded", "text/plain", ""}[r.IntN(3)]
	}
	return p
}

// newDoc draws a JSON document: nested objects and arrays, strings that
// need escapes, and sometimes members whose names fold together, whose
// order is part of the request.
func newDoc(r *rand.Rand, i, amount int) jvalue {
	num := func(s string) jvalue { return jvalue{kind: 'n', text: s} }
	str := func(s string) jvalue { return jvalue{kind: 's', text: s} }
	doc := jvalue{kind: 'o', members: []jmember{
		{"request", num(strconv.Itoa(i))},
		{"amount", num(strconv.Itoa(amount))},
		{"currency", str([...]string{"usd", "eur", "chf"}[r.IntN(3)])},
	}}
	if r.Float64() < 0.5 {
		items := jvalue{kind: 'a'}
		for k := range 1 + r.IntN(3) {
			items.items = append(items.items, jvalue{kind: 'o', members: []jmember{
				{"sku", str(fmt.Sprintf("A-%d/%d", i, k))},
				{"qty", num(strconv.Itoa(1 + r.IntN(5)))},
				{"gift", jvalue{kind: 'l', text: [...]string{"true", "false", "null"}[r.IntN(3)]}},
			}})
		}
		doc.members = append(doc.members, jmember{"items", items})
	}
	if r.Float64() < 0.4 {
		doc.members = append(doc.members, jmember{"note", str("café ✓ \"quoted\" back\\slash, tab\t, line\n, clef 𝄞 </b>")})
	}
	// Members a decoder may take for one name, in a place of the document.
	for r.Float64() < 0.45 {
		names := foldNames[r.IntN(len(foldNames))]
		target := &doc
		if len(doc.members) > 3 && doc.members[3].name == "items" && r.Float64() < 0.4 {
			target = &doc.members[3].value.items[0]
		}
		for n := 1 + r.IntN(2); n > 0; n-- {
			name := names[r.IntN(len(names))]
			if g := groupIndexes(target.members, name); len(g) > 0 && r.IntN(2) == 0 {
				name = target.members[g[r.IntN(len(g))]].name // a duplicate, spelled alike
			}
			var v jvalue
			switch r.IntN(3) {
			case 0:
				v = num(strconv.Itoa(r.IntN(100000)))
			case 1:
				v = str(fmt.Sprintf("v%d", r.IntN(10)))
			default:
				v = jvalue{kind: 'o', members: []jmember{{"x", num("1")}, {"y", num(strconv.Itoa(r.IntN(3)))}}}
			}
			target.members = append(target.members, jmember{name, v})
		}
	}
	return doc
}

// render draws one sending of p: deviant draws a variant that is another
// request; what says which.
func (p *payload) render(r *rand.Rand, deviant bool) (req *request, what string) {
	req = &request{method: p.method, path: p.path, contentEncoding: p.encoding}
	what = "its payload"
	var doc jvalue
	var parts []part
	switch p.kind {
	case kindJSON:
		req.contentType = p.jsonType[r.IntN(len(p.jsonType))]
		doc = p.doc
	case kindForm:
		parts = p.parts
	case kindRaw:
		req.contentType = p.rawType
	}
	raw := p.raw
	if deviant {
		what = p.vary(r, req, &doc, &parts, &raw)
	}
	switch {
	case p.encoding != "" || p.kind == kindRaw:
		req.body = bytes.Clone(raw)
	case p.kind == kindJSON:
		req.body = renderJSON(r, doc, true)
	case p.kind == kindForm:
		boundary := randomBoundary(r)
		if req.contentType == "" {
			req.contentType = "multipart/form-data; boundary=" + boundary
		}
		req.body = renderForm(r, parts, boundary)
	}
	return req, what
}

// vary changes one thing of a sending, so that it is another request.
func (p *payload) vary(r *rand.Rand, req *request, doc *jvalue, parts *[]part, raw *[]byte) string {
	for {
		switch r.IntN(8) {
		case 0:
			old := req.path
			for req.path == old {
				req.path = paths[r.IntN(len(paths))]
			}
			return "its payload to another path"
		case 1:
			req.method = map[string]string{"POST": "PATCH", "PATCH": "POST"}[req.method]
			return "its payload with another method"
		case 2:
			if p.encoding != "" {
				if r.IntN(2) == 0 {
					req.contentEncoding = ""
					return "its compressed body without its Content-Encoding"
				}
				plain, ok := decodeJSON(gunzipped(*raw))
				if !ok {
					continue
				}
				*raw = gzipped(renderJSON(r, plain, false), gzip.BestSpeed)
				return "its payload compressed another way"
			}
			if p.kind != kindRaw {
				continue
			}
			req.contentEncoding = "gzip"
			return "its body with a Content-Encoding"
		case 3:
			switch p.kind {
			case kindJSON:
				req.contentType = "text/plain"
				return "its JSON body as text/plain"
			case kindForm:
				req.contentType = "text/plain"
				return "its form as text/plain"
			}
			req.contentType = "application/json"
			return "its body as JSON"
		case 4, 5:
			if p.kind == kindJSON && p.encoding == "" {
				return varyDoc(r, doc)
			}
			if p.kind == kindForm {
				*parts = varyParts(r, *parts)
				return "another form"
			}
			if p.kind == kindRaw {
				*raw = append(bytes.Clone(*raw), '0')
				return "another body"
			}
		default:
			if p.kind == kindJSON && p.encoding == "" {
				return varyDoc(r, doc)
			}
		}
	}
}

// varyDoc changes doc into another request's: the order or a value of
// members that fold together (half the time, when it has some), a value,
// a number's spelling, or an added member.
func varyDoc(r *rand.Rand, doc *jvalue) string {
	d := cloneJSON(*doc)
	*doc = d
	if r.IntN(3) > 0 {
		// Members that fold together, in a group drawn at random: swap
		// the first and the last, or change a later one (one named
		// exactly as an earlier one, if the group has such a duplicate).
		type group struct {
			obj *jvalue
			idx []int
		}
		var groups []group
		for _, obj := range []*jvalue{doc, firstItem(doc)} {
			if obj == nil {
				continue
			}
			for _, g := range foldGroups(obj.members) {
				if len(g) > 1 {
					groups = append(groups, group{obj, groupIndexes(obj.members, g[0].name)})
				}
			}
		}
		if len(groups) > 0 {
			g := groups[r.IntN(len(groups))]
			ms := g.obj.members
			a, b := g.idx[0], g.idx[len(g.idx)-1]
			if r.IntN(3) == 0 && !sameMember(ms[a], ms[b]) {
				ms[a], ms[b] = ms[b], ms[a]
				return "members that fold together in another order"
			}
			for k, i := range g.idx {
				for _, j := range g.idx[:k] {
					if ms[i].name == ms[j].name {
						b = i
					}
				}
			}
			ms[b].value = jvalue{kind: 's', text: "changed"}
			return "a later member that folds with an earlier one changed"
		}
	}
	switch r.IntN(3) {
	case 0:
		doc.members[1].value.text += "1"
		return "another amount"
	case 1:
		doc.members[1].value.text += [...]string{".0", "e0", ".00"}[r.IntN(3)]
		return "its amount spelled another way"
	}
	doc.members = append(doc.members, jmember{"coupon", jvalue{kind: 's', text: "SAVE10"}})
	return "an added member"
}

func firstItem(doc *jvalue) *jvalue {
	for i := range doc.members {
		if m := &doc.members[i]; m.name == "items" && len(m.value.items) > 0 {
			return &m.value.items[0]
		}
	}
	return nil
}

func groupIndexes(ms []jmember, name string) []int {
	var idx []int
	for i, m := range ms {
		if strings.EqualFold(m.name, name) {
			idx = append(idx, i)
		}
	}
	return idx
}

func sameMember(a, b jmember) bool { return a.name == b.name && sameJSON(a.value, b.value) }

func cloneJSON(v jvalue) jvalue {
	c := v
	if v.items != nil {
		c.items = make([]jvalue, len(v.items))
		for i, it := range v.items {
			c.items[i] = cloneJSON(it)
		}
	}
	if v.members != nil {
		c.members = make([]jmember, len(v.members))
		for i, m := range v.members {
			c.members[i] = jmember{m.name, cloneJSON(m.value)}
		}
	}
	return c
}

func varyParts(r *rand.Rand, parts []part) []part {
	ps := make([]part, len(parts))
	copy(ps, parts)
	switch i := r.IntN(len(ps)); {
	case r.IntN(2) == 0 && len(ps) > 1:
		j := (i + 1) % len(ps)
		ps[i], ps[j] = ps[j], ps[i]
	case len(ps[i].header) > 1:
		h := append([]string(nil), ps[i].header...)
		h[1] = "Content-Type: application/octet-stream"
		ps[i].header = h
	default:
		ps[i].content += "0"
	}
	return ps
}

// renderJSON writes doc as one sending would: free members in any order,
// members that fold together in theirs, with whitespace and escapes drawn
// if vary is set.
func renderJSON(r *rand.Rand, doc jvalue, vary bool) []byte {
	j := jsonWriter{r: r}
	if vary {
		j.spaces = r.IntN(2) == 0
		j.escapes = []float64{0, 0.1, 0.5}[r.IntN(3)]
		j.shuffle = true
	}
	return j.value(nil, doc)
}

type jsonWriter struct {
	r       *rand.Rand
	spaces  bool
	escapes float64
	shuffle bool
}

func (j *jsonWriter) ws(b []byte) []byte {
	if !j.spaces {
		return b
	}
	return append(b, [...]string{"", "", " ", "\n  ", "\t", "\r\n"}[j.r.IntN(6)]...)
}

func (j *jsonWriter) value(b []byte, v jvalue) []byte {
	switch v.kind {
	case 'o':
		b = append(b, '{')
		groups := foldGroups(v.members)
		first := true
		for len(groups) > 0 {
			g := 0
			if j.shuffle {
				g = j.r.IntN(len(groups))
			}
			m := groups[g][0]
			if groups[g] = groups[g][1:]; len(groups[g]) == 0 {
				groups = append(groups[:g], groups[g+1:]...)
			}
			if !first {
				b = append(j.ws(b), ',')
			}
			first = false
			b = j.str(j.ws(b), m.name)
			b = append(j.ws(b), ':')
			b = j.value(j.ws(b), m.value)
		}
		return append(j.ws(b), '}')
	case 'a':
		b = append(b, '[')
		for i, it := range v.items {
			if i > 0 {
				b = append(j.ws(b), ',')
			}
			b = j.value(j.ws(b), it)
		}
		return append(j.ws(b), ']')
	case 's':
		return j.str(b, v.text)
	}
	return append(b, v.text...)
}

// str writes s as a JSON string, escaping some characters that need no
// escape (\u0041 for A, \/ for /, surrogate pairs beyond the BMP).
func (j *jsonWriter) str(b []byte, s string) []byte {
	b = append(b, '"')
	for _, c := range s {
		esc := j.escapes > 0 && j.r.Float64() < j.escapes
		switch {
		case !esc && (c == '"' || c == '\\'):
			b = append(b, '\\', byte(c))
		case !esc && c == '\n':
			b = append(b, `\n`...)
		case !esc && c == '\t':
			b = append(b, `\t`...)
		case esc && c == '/' && j.r.IntN(2) == 0:
			b = append(b, `\/`...)
		case c < 0x20 || esc && c <= 0xffff:
			b = fmt.Appendf(b, [...]string{`\u%04x`, `\u%04X`}[j.r.IntN(2)], c)
		case esc:
			c -= 0x10000
			b = fmt.Appendf(b, `\u%04X\u%04x`, 0xd800+(c>>10), 0xdc00+(c&0x3ff))
		default:
			b = utf8.AppendRune(b, c)
		}
	}
	return append(b, '"')
}

func randomBoundary(r *rand.Rand) string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 16+r.IntN(24))
	for i := range b {
		b[i] = chars[r.IntN(len(chars))]
	}
	return string(b)
}

// renderForm writes a multipart/form-data body with this boundary, and
// sometimes a preamble and an epilogue, which servers skip.
func renderForm(r *rand.Rand, parts []part, boundary string) []byte {
	var b []byte
	if r.IntN(3) == 0 {
		b = append(b, "This is a multi-part message in MIME format.\r\n"...)
	}
	for _, p := range parts {
		b = append(b, "--"+boundary+"\r\n"...)
		for _, h := range p.header {
			b = append(b, h+"\r\n"...)
		}
		b = append(b, "\r\n"+p.content+"\r\n"...)
	}
	b = append(b, "--"+boundary+"--\r\n"...)
	if r.IntN(3) == 0 {
		b = append(b, "epilogue, ignored\r\n"...)
	}
	return b
}

// gzippers keep a compressor per level: making one costs more than
// compressing a request body. Reset makes a reused one write what a new
// one would.
var gzippers = map[int]*sync.Pool{}

func init() {
	for _, level := range []int{gzip.DefaultCompression, gzip.BestSpeed} {
		gzippers[level] = &sync.Pool{New: func() any {
			zw, err := gzip.NewWriterLevel(nil, level)
			if err != nil {
				panic(err)
			}
			return zw
		}}
	}
}

func gzipped(b []byte, level int) []byte {
	var buf bytes.Buffer
	zw := gzippers[level].Get().(*gzip.Writer)
	zw.Reset(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	gzippers[level].Put(zw)
	return buf.Bytes()
}

func gunzipped(b []byte) []byte {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	var out bytes.Buffer
	_, _ = out.ReadFrom(zr)
	return out.Bytes()
}

// The key: policy.md's "The key". keyLines draws one valid way of sending
// key: a quoted string (escaping " and \), sometimes with parameters or
// whitespace around it, or bare when its characters allow.
func keyLines(r *rand.Rand, key string) []string {
	q := quoteKey(key)
	switch x := r.IntN(8); {
	case x == 0:
		return []string{q + ";v=1"}
	case x == 1:
		return []string{" " + q + "\t"}
	case x <= 3 && bareKey(key):
		return []string{[...]string{"", " "}[r.IntN(2)] + key}
	}
	return []string{q}
}

func quoteKey(key string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(key); i++ {
		if key[i] == '"' || key[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(key[i])
	}
	b.WriteByte('"')
	return b.String()
}

// bareKey: the characters the policy accepts unquoted.
func bareKey(key string) bool {
	if key == "" {
		return false
	}
	for _, c := range []byte(key) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~:+/=", c) >= 0) {
			return false
		}
	}
	return true
}

// badKey draws a key header the policy rejects with 400, and the problem
// it names: key-missing without the header, key-invalid otherwise.
func badKey(r *rand.Rand, key string) (lines []string, why, problem string) {
	q := quoteKey(key)
	bad := []struct {
		lines []string
		why   string
	}{
		{[]string{`""`}, "an empty key"},
		{[]string{""}, "an empty header"},
		{[]string{quoteKey(strings.Repeat("k", 256))}, "a key of 256 characters"},
		{[]string{strings.Repeat("k", 256)}, "a bare key of 256 characters"},
		{[]string{`"caf` + "\xc3\xa9" + `"`}, "a non-ASCII key"},
		{[]string{"\"a\x01b\""}, "a control character"},
		{[]string{`"a\qb"`}, "a bad escape"},
		{[]string{strings.TrimSuffix(q, `"`)}, "an unterminated string"},
		{[]string{q + " x"}, "something after the string"},
		{[]string{q + ";V=1"}, "a malformed parameter"},
		{[]string{q, q}, "the header twice"},
		{[]string{q + ", " + q}, "a list of keys"},
		{[]string{"k%20" + strconv.Itoa(r.IntN(10))}, "a bare key with a character outside the set"},
	}
	if r.IntN(len(bad)+1) == 0 {
		return nil, "no key", "key-missing"
	}
	b := bad[r.IntN(len(bad))]
	return b.lines, b.why, "key-invalid"
}
