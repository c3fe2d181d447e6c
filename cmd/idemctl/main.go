// Command idemctl answers an operator's questions about idempotency records
// on a store that keeps only digests of scopes and keys: what happened to
// key K of tenant A (get), let it run anew (forget), how many records are
// where (stats), and purge the expired ones (purge).
//
//	idemctl get|forget|stats|purge -store STORE [-scope S] [-key K] [-json]
//	idemctl get|forget|stats|purge -admin URL   [-scope S] [-key K] [-json]
//
// STORE is what the demo's -db and -records take: a SQLite file path, a
// postgres:// or mysql:// URL, or a redis:// URL (a node, or any node of a
// Cluster). URL is a running process's idemadmin.Handler. See README.md.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
