package etcd

import (
	"bytes"
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// pageSize is how many keys one read of Unprefixed returns.
const pageSize = 100

// Unprefixed reads every key under keyPrefix, a page at a time, and returns how many there are
// and those whose value does not start with valuePrefix: Secrets that are not (yet) encrypted
// with a given key, whose values begin "k8s:enc:<provider>:v1:<key name>:". Only the keys are
// returned, never a value.
func (c *Client) Unprefixed(ctx context.Context, keyPrefix string, valuePrefix []byte) (total int, unprefixed []string, err error) {
	end := clientv3.GetPrefixRangeEnd(keyPrefix)
	from := keyPrefix
	for {
		resp, err := c.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(pageSize))
		if err != nil {
			return 0, nil, c.fail("read "+keyPrefix, err)
		}
		for _, kv := range resp.Kvs {
			total++
			if !bytes.HasPrefix(kv.Value, valuePrefix) {
				unprefixed = append(unprefixed, string(kv.Key))
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return total, unprefixed, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
