package link_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/k3go/k3/internal/engine/cluster/link"
)

// A worker and rank 0 on loopback: the handshake, then one round trip.
func Example() {
	cfg := link.Config{Key: []byte("a cluster key of 16 bytes or more")}
	self := link.Hello{Version: "v1", Fingerprint: "9f2c", Kernels: "generic/generic", Ranks: 2, Rank: 1}

	l, err := link.Listen("127.0.0.1:0", cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	go func() { // the worker: answers one round with its "rows"
		c, _, err := l.Accept(context.Background(), self)
		if err != nil {
			return
		}
		defer c.Close()
		if kind, p, err := c.Await(nil); err == nil {
			c.Send(kind, bytes.ToUpper(p))
		}
	}()

	c, err := link.Dial(context.Background(), l.Addr().String(), cfg, self)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	if err := c.Send(1, []byte("rows "), []byte("please")); err != nil {
		fmt.Println(err)
		return
	}
	kind, rows, err := c.Recv(nil)
	fmt.Println(kind, string(rows), err)
	// Output: 1 ROWS PLEASE <nil>
}
