// stunner-validate: does stunnerd accept a config? It loads each FILE the way `stunnerd -c
// FILE` does (STUNner's config client: environment substitution, defaults, Validate) and
// reconciles it in a dry-run STUNner without rollback (listeners, TLS material and clusters are checked, no
// socket is opened), and prints one line per file: "ok FILE" or "refused FILE: ERROR".
// Exit status: 0 when every file was handled, 2 on a usage error.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/l7mp/stunner"
	stnrv1 "github.com/l7mp/stunner/pkg/apis/v1"
)

func check(file string) error {
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	// the identity and node stunnerd's main() takes from a pod's environment
	id := ""
	name, ok1 := os.LookupEnv(stnrv1.DefaultEnvVarName)
	namespace, ok2 := os.LookupEnv(stnrv1.DefaultEnvVarNamespace)
	if ok1 && ok2 {
		id = fmt.Sprintf("%s/%s", namespace, name)
	}
	st := stunner.NewStunner(stunner.Options{
		Name:   id,
		DryRun: true,
		// the first error, not the rollback's to the empty config
		SuppressRollback: true,
		NodeName:         os.Getenv(stnrv1.DefaultEnvVarNodeName),
		LogOptions:       stunner.LogOptions{Level: "all:NONE"},
	})
	if st == nil {
		return fmt.Errorf("cannot create a STUNner instance")
	}
	defer st.Close()
	c, err := st.LoadConfig("file://" + abs)
	if err != nil {
		return err
	}
	if err := st.Reconcile(c); err != nil {
		if _, restarted := err.(stnrv1.ErrRestarted); !restarted {
			return err
		}
	}
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: stunner-validate FILE...")
		os.Exit(2)
	}
	for _, f := range os.Args[1:] {
		if err := check(f); err != nil {
			fmt.Printf("refused %s: %s\n", f, err.Error())
		} else {
			fmt.Printf("ok %s\n", f)
		}
	}
}
