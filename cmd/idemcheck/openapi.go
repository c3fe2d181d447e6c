package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// openapiTargets reads an OpenAPI 3 document and returns a target for every
// POST and PATCH operation (only method's, if method is not "") that
// declares the key header, with its body taken from the operation's
// examples. base is the URL the document's paths are joined to: the
// document's own servers are not contacted. skipped lists the operations
// that declare the key but cannot be checked, and why.
func openapiTargets(file, base, method string, common *target) (targets []*target, skipped []string, err error) {
	loader := openapi3.NewLoader() // external references stay off: nothing but the target is contacted
	doc, err := loader.LoadFromFile(file)
	if err != nil {
		return nil, nil, usagef("-openapi: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, nil, usagef("-openapi: %s is not a valid OpenAPI 3 document: %v", file, err)
	}
	if doc.Paths == nil {
		return nil, nil, nil
	}
	paths := doc.Paths.Keys()
	sort.Strings(paths)
	for _, path := range paths {
		item := doc.Paths.Value(path)
		for _, m := range []string{http.MethodPost, http.MethodPatch} {
			op := item.GetOperation(m)
			if op == nil || method != "" && m != method {
				continue
			}
			params := append(slices.Clone(item.Parameters), op.Parameters...)
			if findParam(params, "header", common.keyHeader) == nil {
				continue
			}
			t, why := operationTarget(m, path, base, params, op, common)
			if why != "" {
				skipped = append(skipped, fmt.Sprintf("%s %s: %s", m, path, why))
				continue
			}
			targets = append(targets, t)
		}
	}
	return targets, skipped, nil
}

func findParam(params openapi3.Parameters, in, name string) *openapi3.Parameter {
	// An operation's parameter overrides the path item's of the same name.
	for i := len(params) - 1; i >= 0; i-- {
		p := params[i].Value
		if p != nil && p.In == in && strings.EqualFold(p.Name, name) {
			return p
		}
	}
	return nil
}

// operationTarget builds the target of one operation, or says why it
// cannot be checked.
func operationTarget(method, path, base string, params openapi3.Parameters, op *openapi3.Operation, common *target) (*target, string) {
	t := *common
	t.method = method
	t.header = common.header.Clone()

	// Path parameters take their examples; required query and header
	// parameters too, unless -H already sets the header.
	query := url.Values{}
	for _, ref := range params {
		p := ref.Value
		if p == nil || findParam(params, p.In, p.Name) != p {
			continue
		}
		switch {
		case p.In == "path":
			ex, ok := paramExample(p)
			if !ok {
				return nil, fmt.Sprintf("path parameter {%s} has no example", p.Name)
			}
			path = strings.ReplaceAll(path, "{"+p.Name+"}", url.PathEscape(ex))
		case p.In == "query" && p.Required:
			ex, ok := paramExample(p)
			if !ok {
				return nil, fmt.Sprintf("required query parameter %s has no example", p.Name)
			}
			query.Set(p.Name, ex)
		case p.In == "header" && p.Required && !strings.EqualFold(p.Name, t.keyHeader) && t.header.Get(p.Name) == "":
			ex, ok := paramExample(p)
			if !ok {
				return nil, fmt.Sprintf("required header %s has no example (give it with -H)", p.Name)
			}
			t.header.Set(p.Name, ex)
		}
	}
	t.url = strings.TrimSuffix(base, "/") + path
	if len(query) > 0 {
		t.url += "?" + query.Encode()
	}
	t.name = method + " " + t.url

	if op.RequestBody != nil && op.RequestBody.Value != nil {
		mediaType, bodies, why := examples(op.RequestBody.Value.Content)
		if why != "" {
			return nil, why
		}
		t.body = bodies[0]
		for _, b := range bodies[1:] {
			if b != t.body {
				t.otherBody = b
				break
			}
		}
		if t.header.Get("Content-Type") == "" {
			t.header.Set("Content-Type", mediaType)
		}
	}
	return &t, ""
}

// paramExample is a parameter's example as text.
func paramExample(p *openapi3.Parameter) (string, bool) {
	values := []any{p.Example}
	for _, name := range sortedKeys(p.Examples) {
		if ex := p.Examples[name]; ex != nil && ex.Value != nil {
			values = append(values, ex.Value.Value)
		}
	}
	if p.Schema != nil && p.Schema.Value != nil {
		values = append(values, p.Schema.Value.Example)
	}
	for _, v := range values {
		if v != nil {
			return fmt.Sprint(v), true
		}
	}
	return "", false
}

// examples returns a media type of content and the request bodies its
// examples give, JSON types first.
func examples(content openapi3.Content) (mediaType string, bodies []string, why string) {
	types := make([]string, 0, len(content))
	for mt := range content {
		types = append(types, mt)
	}
	sort.SliceStable(types, func(i, j int) bool { return isJSONType(types[i]) && !isJSONType(types[j]) })
	for _, mt := range types {
		m := content[mt]
		var values []any
		if m.Example != nil {
			values = append(values, m.Example)
		}
		for _, name := range sortedKeys(m.Examples) {
			if ex := m.Examples[name]; ex != nil && ex.Value != nil && ex.Value.Value != nil {
				values = append(values, ex.Value.Value)
			}
		}
		if len(values) == 0 && m.Schema != nil && m.Schema.Value != nil && m.Schema.Value.Example != nil {
			values = append(values, m.Schema.Value.Example)
		}
		for _, v := range values {
			if s, ok := v.(string); ok && !isJSONType(mt) {
				bodies = append(bodies, s)
				continue
			}
			b, err := json.Marshal(v)
			if err != nil {
				return "", nil, fmt.Sprintf("example of %s: %v", mt, err)
			}
			bodies = append(bodies, string(b))
		}
		if len(bodies) > 0 {
			return mt, bodies, ""
		}
	}
	return "", nil, "the request body has no example"
}

func isJSONType(mt string) bool {
	mt = strings.ToLower(strings.TrimSpace(strings.Split(mt, ";")[0]))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
