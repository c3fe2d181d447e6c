package main

import (
	"cmp"
	"strconv"
	"strings"
)

// semver is a parsed semantic version: vMAJOR.MINOR.PATCH[-PRERELEASE][+BUILD].
type semver struct {
	major, minor, patch int
	pre                 string
}

// parseSemver parses a version as the go command writes them, with the v.
func parseSemver(v string) (semver, bool) {
	rest, ok := strings.CutPrefix(v, "v")
	if !ok {
		return semver{}, false
	}
	rest, _, _ = strings.Cut(rest, "+")
	core, pre, hasPre := strings.Cut(rest, "-")
	if hasPre && pre == "" {
		return semver{}, false
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return semver{}, false
	}
	var n [3]int
	for i, p := range parts {
		if p == "" || len(p) > 1 && p[0] == '0' {
			return semver{}, false
		}
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return semver{}, false
		}
		n[i] = x
	}
	return semver{n[0], n[1], n[2], pre}, true
}

// compareSemver orders versions as semantic versioning does: a
// pre-release comes before its release.
func compareSemver(a, b semver) int {
	if c := cmp.Compare(a.major, b.major); c != 0 {
		return c
	}
	if c := cmp.Compare(a.minor, b.minor); c != 0 {
		return c
	}
	if c := cmp.Compare(a.patch, b.patch); c != 0 {
		return c
	}
	switch {
	case a.pre == b.pre:
		return 0
	case a.pre == "":
		return 1
	case b.pre == "":
		return -1
	}
	as, bs := strings.Split(a.pre, "."), strings.Split(b.pre, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		an, aErr := strconv.Atoi(as[i])
		bn, bErr := strconv.Atoi(bs[i])
		var c int
		switch {
		case aErr == nil && bErr == nil:
			c = cmp.Compare(an, bn)
		case aErr == nil:
			c = -1 // numeric identifiers come first
		case bErr == nil:
			c = 1
		default:
			c = strings.Compare(as[i], bs[i])
		}
		if c != 0 {
			return c
		}
	}
	return cmp.Compare(len(as), len(bs))
}

// latestTag returns the highest version among tags that start with prefix
// followed by a semantic version, and the tag itself.
func latestTag(tags []string, prefix string) (version, tag string) {
	var best semver
	for _, t := range tags {
		v, ok := strings.CutPrefix(t, prefix)
		if !ok || strings.Contains(v, "/") {
			continue
		}
		sv, ok := parseSemver(v)
		if !ok {
			continue
		}
		if tag == "" || compareSemver(sv, best) > 0 {
			best, version, tag = sv, v, t
		}
	}
	return version, tag
}
