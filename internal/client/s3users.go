package client

import (
	"context"

	"github.com/braidfs/braid/internal/mdsproto"
)

// S3User is an access key of the S3 gateway. SecretKey is set only in
// the answer to S3UserAdd: the MDS never hands it out again.
type S3User = mdsproto.S3User

// S3UserSpec is a new S3 user: its name and the identity it acts as
// (nil Uid: the next of the S3 users' own range; nil Gid: the uid).
type S3UserSpec = mdsproto.S3UserReq

// S3UserAdd creates an S3 user with a new access key and secret and a uid
// of its own.
func (c *Client) S3UserAdd(ctx context.Context, name string) (S3User, error) {
	return c.S3UserCreate(ctx, S3UserSpec{Name: name})
}

// S3UserCreate creates the S3 user spec describes, with a new access key
// and secret.
func (c *Client) S3UserCreate(ctx context.Context, spec S3UserSpec) (S3User, error) {
	var out S3User
	err := c.mds(ctx, mdsproto.OpS3UserAdd, spec, &out)
	return out, err
}

// S3Users lists the S3 users (without secrets).
func (c *Client) S3Users(ctx context.Context) ([]S3User, error) {
	var out mdsproto.S3UserListResp
	err := c.mds(ctx, mdsproto.OpS3UserList, struct{}{}, &out)
	return out.Users, err
}

// S3UserRemove deletes an S3 user; its key stops working.
func (c *Client) S3UserRemove(ctx context.Context, name string) error {
	return c.mds(ctx, mdsproto.OpS3UserRemove, mdsproto.S3UserReq{Name: name}, nil)
}

// S3SigningKey is the SigV4 signing key of an access key for one day
// (yyyymmdd), region and service, and the user it belongs to (its name
// and identity; no secret).
func (c *Client) S3SigningKey(ctx context.Context, access, date, region, service string) (user S3User, key []byte, err error) {
	var out mdsproto.S3SigningKeyResp
	err = c.mds(ctx, mdsproto.OpS3SigningKey, mdsproto.S3SigningKeyReq{AccessKey: access, Date: date, Region: region, Service: service}, &out)
	return S3User{Name: out.Name, AccessKey: access, Uid: out.Uid, Gid: out.Gid, Groups: out.Groups, Admin: out.Admin}, out.Key, err
}
