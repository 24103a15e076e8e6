// SPDX-License-Identifier: GPL-2.0
/*
 * Wrappers of static inline functions, macros and struct members for the
 * Rust abstraction layer (see helpers.h). Each body is a single expression.
 */
#include <rdma/uverbs_ioctl.h>

#include "helpers.h"

bool mr_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

enum ib_port_state mr_ib_get_curr_port_state(struct net_device *ndev)
{
	return ib_get_curr_port_state(ndev);
}

void mr_ib_mark_name_assigned_by_user(struct ib_device *dev)
{
	ib_mark_name_assigned_by_user(dev);
}

struct net *mr_dev_net(const struct net_device *ndev)
{
	return dev_net(ndev);
}

void mr_dev_hold(struct net_device *ndev)
{
	dev_hold(ndev);
}

void mr_dev_put(struct net_device *ndev)
{
	dev_put(ndev);
}

struct net_device *mr_netdev_notifier_info_to_dev(void *info)
{
	return netdev_notifier_info_to_dev(info);
}

void mr_spin_lock_bh(spinlock_t *lock)
{
	spin_lock_bh(lock);
}

void mr_spin_unlock_bh(spinlock_t *lock)
{
	spin_unlock_bh(lock);
}

int mr_spin_trylock_bh(spinlock_t *lock)
{
	return spin_trylock_bh(lock);
}

unsigned long mr_spin_lock_irqsave(spinlock_t *lock)
{
	unsigned long flags;

	spin_lock_irqsave(lock, flags);
	return flags;
}

int mr_spin_trylock_irqsave(spinlock_t *lock, unsigned long *flags)
{
	return spin_trylock_irqsave(lock, *flags);
}

void mr_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags)
{
	spin_unlock_irqrestore(lock, flags);
}

void mr_rcu_read_lock_bh(void)
{
	rcu_read_lock_bh();
}

void mr_rcu_read_unlock_bh(void)
{
	rcu_read_unlock_bh();
}

int mr_ib_copy_to_udata(struct ib_udata *udata, void *src, size_t len)
{
	return ib_copy_to_udata(udata, src, len);
}

struct ib_udata *mr_attrs_udata(struct uverbs_attr_bundle *attrs)
{
	return attrs ? &attrs->driver_udata : NULL;
}

int mr_ib_copy_from_udata(void *dst, struct ib_udata *udata, size_t len)
{
	return ib_copy_from_udata(dst, udata, len);
}

bool mr_ib_is_udata_cleared(struct ib_udata *udata, size_t offset, size_t len)
{
	return ib_is_udata_cleared(udata, offset, len);
}

struct ib_ucontext *mr_udata_ucontext(struct ib_udata *udata)
{
	return rdma_udata_to_uverbs_attr_bundle(udata)->context;
}

u64 mr_mmap_entry_offset(const struct rdma_user_mmap_entry *entry)
{
	return rdma_user_mmap_get_offset(entry);
}

void *mr_vzalloc_account(unsigned long size)
{
	return __vmalloc(size, GFP_KERNEL_ACCOUNT | __GFP_ZERO);
}

unsigned long mr_vma_start(const struct vm_area_struct *vma)
{
	return vma->vm_start;
}

bool mr_vma_exec(const struct vm_area_struct *vma)
{
	return vma->vm_flags & VM_EXEC;
}

void mr_vma_ring_flags(struct vm_area_struct *vma)
{
	vm_flags_mod(vma, VM_DONTEXPAND | VM_DONTDUMP, VM_MAYEXEC);
}

struct scatterlist *mr_umem_sgl(struct ib_umem *umem)
{
	return umem->sgt_append.sgt.sgl;
}

unsigned int mr_umem_nents(struct ib_umem *umem)
{
	return umem->sgt_append.sgt.orig_nents;
}

struct page *mr_sg_page_iter_page(struct sg_page_iter *piter)
{
	return sg_page_iter_page(piter);
}

void mr_memcpy_to_page(struct page *page, size_t offset, const void *from, size_t len)
{
	memcpy_to_page(page, offset, from, len);
}

void mr_memcpy_from_page(void *to, struct page *page, size_t offset, size_t len)
{
	memcpy_from_page(to, page, offset, len);
}

unsigned long mr_copy_from_user(void *to, u64 from, unsigned long n)
{
	return copy_from_user(to, u64_to_user_ptr(from), n);
}

struct sk_buff *mr_alloc_skb(unsigned int size)
{
	return alloc_skb(size, GFP_ATOMIC);
}

void mr_kfree_skb(struct sk_buff *skb)
{
	kfree_skb(skb);
}

int mr_skb_linearize(struct sk_buff *skb)
{
	return skb_linearize(skb);
}

unsigned char *mr_skb_data(const struct sk_buff *skb)
{
	return skb->data;
}

unsigned int mr_skb_len(const struct sk_buff *skb)
{
	return skb->len;
}

__be32 mr_skb_saddr4(const struct sk_buff *skb)
{
	return ip_hdr(skb)->saddr;
}

__be32 mr_skb_daddr4(const struct sk_buff *skb)
{
	return ip_hdr(skb)->daddr;
}

int mr_addr_ifindex(const struct sock *sk, __be32 addr)
{
	struct net_device *dev = __ip_dev_find(sock_net(sk), addr, false);

	return dev ? dev->ifindex : 0;
}

bool mr_skb_ce4(const struct sk_buff *skb)
{
	return INET_ECN_is_ce(ip_hdr(skb)->tos);
}


int mr_inet_iif(const struct sk_buff *skb)
{
	return inet_iif(skb);
}

int mr_inet6_iif(const struct sk_buff *skb)
{
	return inet6_iif(skb);
}

bool mr_skb_is_ip6(const struct sk_buff *skb)
{
	return ip_hdr(skb)->version == 6;
}

struct in6_addr mr_skb_saddr6(const struct sk_buff *skb)
{
	return ipv6_hdr(skb)->saddr;
}

struct in6_addr mr_skb_daddr6(const struct sk_buff *skb)
{
	return ipv6_hdr(skb)->daddr;
}

bool mr_skb_ce6(const struct sk_buff *skb)
{
	return INET_ECN_is_ce(ipv6_get_dsfield(ipv6_hdr(skb)));
}

int mr_addr_ifindex6(const struct sock *sk, const struct in6_addr *addr)
{
#if IS_ENABLED(CONFIG_IPV6)
	struct net_device *dev = ipv6_dev_find(sock_net(sk), addr, NULL);

	return dev ? dev->ifindex : 0;
#else
	return 0;
#endif
}

int mr_udp_sock_create6(struct net *net, struct udp_port_cfg *cfg, struct socket **sockp)
{
	return udp_sock_create6(net, cfg, sockp);
}

struct dst_entry *mr_ip6_dst_lookup_flow(struct net *net, const struct sock *sk, struct flowi6 *fl6)
{
	return ip6_dst_lookup_flow(net, sk, fl6, NULL);
}

unsigned int mr_dst_headroom(struct dst_entry *dst)
{
	return LL_RESERVED_SPACE(dst->dev);
}

void mr_dst_release(struct dst_entry *dst)
{
	dst_release(dst);
}

void mr_udp6_xmit(struct dst_entry *dst, struct sock *sk, struct sk_buff *skb,
		  const struct in6_addr *saddr, const struct in6_addr *daddr,
		  u8 tclass, __be16 sport, __be16 dport)
{
#if IS_ENABLED(CONFIG_IPV6)
	udp_tunnel6_xmit_skb(dst, sk, skb, NULL, saddr, daddr, tclass, 64, 0, sport, dport, false, 0);
#else
	kfree_skb(skb);
	dst_release(dst);
#endif
}

void mr_skb_reserve(struct sk_buff *skb, int len)
{
	skb_reserve(skb, len);
}

void *mr_skb_put(struct sk_buff *skb, unsigned int len)
{
	return skb_put(skb, len);
}

struct rtable *mr_ip_route_output_key(struct net *net, struct flowi4 *fl4)
{
	return ip_route_output_key(net, fl4);
}

bool mr_is_err(const void *ptr)
{
	return IS_ERR(ptr);
}

long mr_ptr_err(const void *ptr)
{
	return PTR_ERR(ptr);
}


void mr_ip_rt_put(struct rtable *rt)
{
	ip_rt_put(rt);
}


struct sock *mr_socket_sk(struct socket *sock)
{
	return sock->sk;
}

void *mr_rcu_sk_user_data(const struct sock *sk)
{
	return rcu_dereference_sk_user_data(sk);
}

void mr_hrtimer_start_ns(struct hrtimer *timer, u64 ns)
{
	hrtimer_start(timer, ns_to_ktime(ns), HRTIMER_MODE_REL_SOFT);
}

void mr_init_work(struct work_struct *work, work_func_t fn)
{
	INIT_WORK(work, fn);
}

bool mr_queue_work_dfl(struct work_struct *work)
{
	return queue_work(system_dfl_wq, work);
}

bool mr_cancel_work_sync(struct work_struct *work)
{
	return cancel_work_sync(work);
}

u64 mr_ktime_get_ns(void)
{
	return ktime_get_ns();
}

struct net *mr_sock_net(const struct sock *sk)
{
	return sock_net(sk);
}

void *mr_net_generic(const struct net *net, unsigned int id)
{
	return net_generic(net, id);
}

struct dst_entry *mr_dst_check(struct dst_entry *dst, u32 cookie)
{
	return dst_check(dst, cookie);
}

bool mr_dst_on_blackhole(const struct dst_entry *dst)
{
	return dst_dev(dst) == blackhole_netdev;
}

void mr_dst_hold(struct dst_entry *dst)
{
	dst_hold(dst);
}

struct dst_entry *mr_rt_dst(struct rtable *rt)
{
	return &rt->dst;
}

struct rtable *mr_dst_rtable(struct dst_entry *dst)
{
	return dst_rtable(dst);
}

u32 mr_rt6_cookie(struct dst_entry *dst)
{
	return rt6_get_cookie(dst_rt6_info(dst));
}

unsigned int mr_rt_headroom(struct rtable *rt)
{
	return LL_RESERVED_SPACE(rt->dst.dev);
}

struct nlattr *mr_nla_nest_start(struct sk_buff *skb, int attrtype)
{
	return nla_nest_start(skb, attrtype);
}

void mr_nla_nest_end(struct sk_buff *skb, struct nlattr *start)
{
	nla_nest_end(skb, start);
}

void mr_nla_nest_cancel(struct sk_buff *skb, struct nlattr *start)
{
	nla_nest_cancel(skb, start);
}
