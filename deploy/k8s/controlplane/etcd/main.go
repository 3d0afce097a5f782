// Command etcd is the etcd server, at the version the API server's own
// module requires (go.etcd.io/etcd/server/v3 in go.mod): the tests of
// deploy/k8s run it for the API server and in the etcd pods of the base.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
