// Command etcd is etcd's server built from its module (go.etcd.io/etcd/server/v3), which cannot be
// `go install`ed with the version Kubernetes pins: the etcd repository's own main package lives in its
// root module, whose go.mod replaces the other etcd modules with local paths.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
