// stunner-cds: STUNner's own config discovery server (github.com/l7mp/stunner/pkg/config/server,
// what the operator runs) on ADDR, driven line by line from stdin, for the tests:
//
//	upsert NAMESPACE/NAME JSON   the StunnerConfig JSON for that gateway (one line)
//	delete NAMESPACE/NAME        the operator's delete: a zero config pushed to watchers
//	stop                         close the server and every client connection
//	start                        a new server on the same ADDR, with every config it held
//	quit                         exit
//
// Every command is answered with one line on stdout, "ok" or "error: ...", so the test knows
// it has been applied. The first line is "listening ADDR".
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr/funcr"
	stnrv1 "github.com/l7mp/stunner/pkg/apis/v1"
	cdsserver "github.com/l7mp/stunner/pkg/config/server"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: stunner-cds ADDR")
		os.Exit(2)
	}
	addr := os.Args[1]
	log := funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, "stunner-cds:", prefix, args)
	}, funcr.Options{Verbosity: 4})
	configs := map[string]*stnrv1.StunnerConfig{}

	var srv *cdsserver.Server
	start := func() error {
		s := cdsserver.New(addr, nil, log)
		for id, c := range configs {
			s.UpsertConfig(id, c)
		}
		if err := s.Start(context.Background()); err != nil {
			return err
		}
		srv = s
		return nil
	}
	if err := start(); err != nil {
		fmt.Fprintln(os.Stderr, "stunner-cds:", err)
		os.Exit(1)
	}
	fmt.Println("listening", addr)

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		f := strings.SplitN(strings.TrimSpace(in.Text()), " ", 3)
		var err error
		switch {
		case f[0] == "upsert" && len(f) == 3:
			c := &stnrv1.StunnerConfig{}
			if err = json.Unmarshal([]byte(f[2]), c); err == nil {
				configs[f[1]] = c
				if srv != nil {
					srv.UpsertConfig(f[1], c)
				}
			}
		case f[0] == "delete" && len(f) == 2:
			delete(configs, f[1])
			if srv != nil {
				srv.DeleteConfig(f[1])
			}
		case f[0] == "stop":
			if srv != nil {
				srv.Close()
				srv = nil
			}
		case f[0] == "start":
			if srv == nil {
				err = start()
			}
		case f[0] == "quit":
			fmt.Println("ok")
			return
		default:
			err = fmt.Errorf("unknown command %q", f[0])
		}
		if err != nil {
			fmt.Println("error:", err)
		} else {
			fmt.Println("ok")
		}
	}
}
