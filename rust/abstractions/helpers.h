/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Wrappers of static inline functions, macros and struct members that
 * bindgen cannot turn into callable symbols or fields. No logic lives here:
 * each body is a single expression.
 */
#ifndef METAROCE_HELPERS_H
#define METAROCE_HELPERS_H

#include <linux/netdevice.h>
#include <linux/inetdevice.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_umem.h>
#include <linux/highmem.h>
#include <linux/hrtimer.h>
#include <linux/workqueue.h>
#include <linux/scatterlist.h>
#include <linux/skbuff.h>
#include <linux/udp.h>
#include <net/inet_ecn.h>
#include <net/ip.h>
#include <net/route.h>
#include <net/udp_tunnel.h>
#include <net/ip6_fib.h>
#include <net/ipv6.h>
#include <net/addrconf.h>
#include <net/ip6_route.h>
#include <net/netns/generic.h>
#include <linux/rtnetlink.h>
#include <net/netlink.h>
#include <rdma/rdma_netlink.h>
#include <rdma/uverbs_ioctl.h>
#include <linux/mm.h>
#include <linux/vmalloc.h>

bool mr_ib_device_try_get(struct ib_device *dev);
enum ib_port_state mr_ib_get_curr_port_state(struct net_device *ndev);
void mr_ib_mark_name_assigned_by_user(struct ib_device *dev);
struct net *mr_dev_net(const struct net_device *ndev);
void mr_dev_hold(struct net_device *ndev);
void mr_dev_put(struct net_device *ndev);
struct net_device *mr_netdev_notifier_info_to_dev(void *info);

void mr_spin_lock_bh(spinlock_t *lock);
void mr_spin_unlock_bh(spinlock_t *lock);
int mr_spin_trylock_bh(spinlock_t *lock);
unsigned long mr_spin_lock_irqsave(spinlock_t *lock);
int mr_spin_trylock_irqsave(spinlock_t *lock, unsigned long *flags);
void mr_spin_unlock_irqrestore(spinlock_t *lock, unsigned long flags);
void mr_rcu_read_lock_bh(void);
void mr_rcu_read_unlock_bh(void);

int mr_ib_copy_to_udata(struct ib_udata *udata, void *src, size_t len);
/* The driver data of a uverbs call; NULL for a kernel caller (no bundle). */
struct ib_udata *mr_attrs_udata(struct uverbs_attr_bundle *attrs);
int mr_ib_copy_from_udata(void *dst, struct ib_udata *udata, size_t len);
bool mr_ib_is_udata_cleared(struct ib_udata *udata, size_t offset, size_t len);
/* The user context of a uverbs call's driver data (never NULL for one). */
struct ib_ucontext *mr_udata_ucontext(struct ib_udata *udata);
u64 mr_mmap_entry_offset(const struct rdma_user_mmap_entry *entry);
/* Zeroed, virtually contiguous, charged to the caller's memory cgroup. */
void *mr_vzalloc_account(unsigned long size);
unsigned long mr_vma_start(const struct vm_area_struct *vma);
bool mr_vma_exec(const struct vm_area_struct *vma);
/* A ring's mapping: never grown by mremap(), left out of core dumps, never
 * made executable by mprotect(). */
void mr_vma_ring_flags(struct vm_area_struct *vma);
struct scatterlist *mr_umem_sgl(struct ib_umem *umem);
unsigned int mr_umem_nents(struct ib_umem *umem);
struct page *mr_sg_page_iter_page(struct sg_page_iter *piter);
void mr_memcpy_to_page(struct page *page, size_t offset, const void *from, size_t len);
void mr_memcpy_from_page(void *to, struct page *page, size_t offset, size_t len);
unsigned long mr_copy_from_user(void *to, u64 from, unsigned long n);

struct sk_buff *mr_alloc_skb(unsigned int size);
void mr_kfree_skb(struct sk_buff *skb);
int mr_skb_linearize(struct sk_buff *skb);
unsigned char *mr_skb_data(const struct sk_buff *skb);
unsigned int mr_skb_len(const struct sk_buff *skb);
__be32 mr_skb_saddr4(const struct sk_buff *skb);
__be32 mr_skb_daddr4(const struct sk_buff *skb);
int mr_addr_ifindex(const struct sock *sk, __be32 addr);
bool mr_skb_ce4(const struct sk_buff *skb);
void mr_skb_reserve(struct sk_buff *skb, int len);
void *mr_skb_put(struct sk_buff *skb, unsigned int len);
struct rtable *mr_ip_route_output_key(struct net *net, struct flowi4 *fl4);
bool mr_is_err(const void *ptr);
long mr_ptr_err(const void *ptr);
void mr_ip_rt_put(struct rtable *rt);
struct sock *mr_socket_sk(struct socket *sock);

/* IPv6: each a stub answering "not supported" in a kernel without it. */
int mr_inet_iif(const struct sk_buff *skb);
int mr_inet6_iif(const struct sk_buff *skb);
bool mr_skb_is_ip6(const struct sk_buff *skb);
struct in6_addr mr_skb_saddr6(const struct sk_buff *skb);
struct in6_addr mr_skb_daddr6(const struct sk_buff *skb);
bool mr_skb_ce6(const struct sk_buff *skb);
int mr_addr_ifindex6(const struct sock *sk, const struct in6_addr *addr);
int mr_udp_sock_create6(struct net *net, struct udp_port_cfg *cfg, struct socket **sockp);
struct dst_entry *mr_ip6_dst_lookup_flow(struct net *net, const struct sock *sk, struct flowi6 *fl6);
unsigned int mr_dst_headroom(struct dst_entry *dst);
void mr_dst_release(struct dst_entry *dst);
void mr_udp6_xmit(struct dst_entry *dst, struct sock *sk, struct sk_buff *skb,
		  const struct in6_addr *saddr, const struct in6_addr *daddr,
		  u8 tclass, __be16 sport, __be16 dport);

struct nlattr *mr_nla_nest_start(struct sk_buff *skb, int attrtype);
void mr_nla_nest_end(struct sk_buff *skb, struct nlattr *start);
void mr_nla_nest_cancel(struct sk_buff *skb, struct nlattr *start);
void *mr_rcu_sk_user_data(const struct sock *sk);
struct net *mr_sock_net(const struct sock *sk);
void *mr_net_generic(const struct net *net, unsigned int id);
struct dst_entry *mr_dst_check(struct dst_entry *dst, u32 cookie);
bool mr_dst_on_blackhole(const struct dst_entry *dst);
void mr_dst_hold(struct dst_entry *dst);
struct dst_entry *mr_rt_dst(struct rtable *rt);
struct rtable *mr_dst_rtable(struct dst_entry *dst);
u32 mr_rt6_cookie(struct dst_entry *dst);
unsigned int mr_rt_headroom(struct rtable *rt);
void mr_hrtimer_start_ns(struct hrtimer *timer, u64 ns);
void mr_init_work(struct work_struct *work, work_func_t fn);
bool mr_queue_work_dfl(struct work_struct *work);
bool mr_cancel_work_sync(struct work_struct *work);
u64 mr_ktime_get_ns(void);

/* Tracepoints (trace.c, metaroce_trace.h). */
void mr_trace_resend(const u8 *peer, u16 path, u32 psn, u16 sport);
void mr_trace_relocate(const u8 *peer, u16 path, u32 psn, u16 to_path);
void mr_trace_path_moved(const u8 *peer, u16 path, u16 from_sport, u16 to_sport);
void mr_trace_ecn(const u8 *peer, u16 path, u16 marks, u32 path_window, u32 conn_window);
void mr_trace_rate_hint(const u8 *peer, u32 from_kbps, u32 to_kbps);
void mr_trace_peer_restart(const u8 *peer, u32 qps);
void mr_trace_peer_silence(const u8 *peer, u32 silent_ms, u32 qps_failed);
void mr_trace_qp_error(const u8 *peer, u32 qpn, u32 dest_qpn, u32 from_state);

#endif
