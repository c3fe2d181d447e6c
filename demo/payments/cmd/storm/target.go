package main

import (
	"fmt"
	"net"
	"net/url"
)

// checkTarget refuses any target that is not on this machine's loopback:
// the storm is a load test, and load tests stay at home.
func checkTarget(target string) error {
	if target == "" {
		return nil
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-target %q is not an http(s) URL", target)
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("-target %q is not a loopback address: the storm only targets this machine", target)
}
