// Command txm-testdb gives a test outside this module a fresh PostgreSQL database, found the
// way every test here finds one (lingo-utils/pglocal): TEST_DATABASE_URL, else the server
// at 127.0.0.1:5432, else a throwaway cluster started from the installed binaries.
//
//	txm-testdb -name client_examples
//
// It prints the new database's DSN as its first line, keeps the database while its standard
// input stays open, then drops it (and stops a throwaway cluster) and exits. The client
// module's tests use it, so they need no database driver of their own. When no server can
// be found it exits 2 with a message saying how to provide one.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal"
)

func main() {
	name := flag.String("name", "txm_testdb", "a hint for the database name (a random suffix follows)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, err := pglocal.FindServer(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "txm-testdb: no PostgreSQL server for tests (%v): set %s=postgres://user@host:port/db (a role that may CREATE DATABASE), start the local server, or install the `postgresql` package so a throwaway cluster can be started\n", err, pglocal.EnvDatabaseURL)
		os.Exit(2)
	}
	code := serve(ctx, server, *name)
	if err := server.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "txm-testdb: stop the throwaway cluster:", err)
		code = 1
	}
	os.Exit(code)
}

var unsafe = regexp.MustCompile(`[^a-z0-9_]+`)

// serve creates the database, hands its DSN out and drops it once stdin closes.
func serve(ctx context.Context, server *pglocal.Server, hint string) int {
	hint = strings.Trim(unsafe.ReplaceAllString(strings.ToLower(hint), "_"), "_")
	database := pglocal.UniqueDatabaseName("txm_" + hint[:min(len(hint), 40)])
	if err := pglocal.CreateDatabase(ctx, server.AdminDSN, database, "template0"); err != nil {
		fmt.Fprintln(os.Stderr, "txm-testdb: create database:", err)
		return 1
	}
	fmt.Println(pglocal.WithDatabase(server.AdminDSN, database))
	// The test holds stdin open while it needs the database; EOF (or its death) ends it.
	_, _ = io.Copy(io.Discard, os.Stdin)
	dropCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := pglocal.DropDatabase(dropCtx, server.AdminDSN, database); err != nil {
		fmt.Fprintln(os.Stderr, "txm-testdb: drop database:", err)
		return 1
	}
	return 0
}
