// Command braid is the single binary of the braid file system: every
// server role and every client command is a subcommand.
package main

import (
	"os"

	"github.com/braidfs/braid/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
